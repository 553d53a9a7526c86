// tessera/backend/registry.hpp — the registry of backend families and their
// devices: compiled-in registration, loading plugins from shared libraries
// (scored per machine), enumeration and backend creation.
//
// Plugin files are named libtessera-<name>.so (base) and
// libtessera-<name>-<variant>.so (variants, e.g. libtessera-cpu-haswell.so);
// see include/tessera/backend.h for the entry points. Paths are UTF-8.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/backend.h"
#include "tessera/backend/backend_reg.hpp"
#include "tessera/backend/device.hpp"

namespace tessera {

namespace detail {
struct plugin_scan; // the search folders' listings (loader.cpp)
}

// One library considered by load_best.
struct load_candidate {
    std::string path;  // UTF-8
    int score = -1;    // tessera_backend_score's result; -1 when it could not be asked
    std::string error; // why it was not loaded; empty for the loaded one
};

// The outcome of load_best for one backend name.
struct load_report {
    // The family; for a TESSERA_BACKEND_PATH file that failed to load, the
    // family its file name claims, else "TESSERA_BACKEND_PATH".
    std::string name;
    backend_reg loaded;                    // empty when nothing was loaded
    bool already_registered = false;       // a backend of that name was registered before
    std::vector<load_candidate> candidates; // every file considered, best score first
};

// Thread-safety: lookups (reg/device enumeration, find_*, init_*) may run
// concurrently from any number of threads; registration, load and unload
// are serialized among themselves and exclude lookups only briefly.
class registry {
public:
    // An empty registry (no compiled-in backends): for tests and embedders.
    registry();
    // Unloads every backend without live objects; a backend that still has
    // some stays loaded until its last object is destroyed.
    ~registry();
    registry(const registry &) = delete;
    registry & operator=(const registry &) = delete;

    // The process-wide registry. On first use it registers the backends
    // compiled into this program (with TESSERA_CPU_STATIC: the CPU). It does
    // not load plugins by itself: call load_all() (or load_best) once.
    static registry & global();

    // --- registration ------------------------------------------------------
    // Registers a compiled-in backend family and its devices. Throws
    // tessera::error (registry unchanged) when the reg is invalid (API major
    // differs, table too small, a required slot empty, no name) or a family
    // of that name is already registered. Devices that get_device returns
    // as null or that are invalid are skipped with a log message.
    backend_reg register_backend(tsr_reg * reg);
    // Registers one device on its own (its family need not be registered).
    // Throws tessera::error when it is invalid or its name is taken.
    device register_device(tsr_device * dev);

    // --- loading -----------------------------------------------------------
    // Opens the shared library at `path` (UTF-8; a bare file name is the
    // file in the current folder, never a search of the system's library
    // folders), asks tessera_backend_score if it has one (0: not supported
    // here, refused), calls tessera_backend_init, checks the API version and
    // registers the result.
    // Every failure throws tessera::error naming the path and the cause
    // (cannot open + the loader's message, score 0, no init symbol, init
    // returned null, API major mismatch with both versions, invalid tables,
    // duplicate name), and leaves the registry and the process's loaded
    // libraries as they were. While the process has a single thread, the
    // library is first opened and scored in a child process
    // (backend/score_probe.hpp): one that crashes there, calls exit(), or
    // takes more than 30 s is refused with an error saying so and never
    // opened in this process. A plugin that calls exit() later in
    // its loading (in its init or tables) ends the program with status 70
    // and "error: backend library '<path>' called exit(<status>) during
    // <call>; ..." on stderr (backend/plugin_exit_guard.hpp).
    backend_reg load(const std::filesystem::path & path);

    // Finds every libtessera-<name>-*.so in the search paths (see
    // search_paths; a symbolic link of that name that leads nowhere is a
    // candidate that cannot be opened), asks each for its score (in a child
    // process while this one has a single thread: one that crashes, exits
    // or hangs there is refused, as in load), and loads only the best (on failure the next best); the others
    // are never opened in this process. When none scores above 0, loads libtessera-<name>.so if
    // present. Does nothing when a family named `name` is already
    // registered. Never throws for a bad plugin: each problem is in the
    // report (and logged).
    load_report load_best(std::string_view name, const std::filesystem::path & dir = {});

    // load_best for every known family (cpu first, then the GPU families,
    // blas, rpc)
    // and TESSERA_BACKEND_PATH: a file is loaded first, so it takes its
    // family's place (one CPU variant forced; when it cannot be loaded the
    // family's best is); a directory is searched, after the known
    // families, for every libtessera-<name>[-<variant>].so family not yet
    // registered (one this user may not list is named in the log). Each
    // search folder is listed once per call, when first searched.
    std::vector<load_report> load_all(const std::filesystem::path & dir = {});

    // Removes the family and its devices and closes its library. Throws
    // tessera::error (nothing changes) when a backend, buffer or thread pool
    // made through it is still alive, or when it is not registered here.
    void unload(const backend_reg & reg);

    // Directories load_best searches, in order: `dir` (when given), the
    // directory TESSERA_BACKEND_PATH names (one path, not a list), the directory of the running
    // executable, then the install plugin directory (as found from the
    // executable's directory, e.g. ../lib/tessera, then the configured
    // absolute one: CMake's TESSERA_PLUGIN_INSTALL_DIR). The current working
    // directory is not searched unless one of these names it.
    std::vector<std::filesystem::path> search_paths(const std::filesystem::path & dir = {}) const;
    // For messages saying where plugins were looked for and none was
    // found: search_paths() (without `dir`), then the install plugin
    // directories it leaves out because they do not exist, marked
    // " (missing)"; made printable (printable_utf8).
    std::vector<std::string> searched_folders() const;

    // Family names load_all tries, in order.
    static const std::vector<std::string> & known_names();

    // --- enumeration -------------------------------------------------------
    size_t reg_count() const;
    backend_reg reg_at(size_t i) const; // throws for i out of range
    std::vector<backend_reg> regs() const;
    // ASCII case-insensitive; nullopt when absent.
    std::optional<backend_reg> find_reg(std::string_view name) const;

    size_t device_count() const;
    device device_at(size_t i) const; // throws for i out of range
    std::vector<device> devices() const;
    std::optional<device> find_device(std::string_view name) const;
    // The first device of that type.
    std::optional<device> find_device(tsr_device_type device_type) const;

    // --- backends ----------------------------------------------------------
    // A backend on the named device / the first device of `device_type`; throws
    // tessera::error naming what was asked and listing the devices there are.
    backend init_by_name(std::string_view name, std::string_view params = {}) const;
    backend init_by_type(tsr_device_type device_type, std::string_view params = {}) const;
    // A GPU if there is one, else an integrated GPU, else the CPU.
    backend init_best(std::string_view params = {}) const;
    // The device init_best would use (nullopt when there is none).
    std::optional<device> best_device() const;

    // --- diagnostics -------------------------------------------------------
    // Receives skipped devices and load_best/load_all problems (one line
    // each, no trailing newline). Default: written to stderr prefixed
    // "tessera: ". Pass nullptr to drop them. Each distinct message is
    // passed on once in the registry's life: load_all runs again for every
    // session (bench makes one per model and thread count), and the same bad
    // plugin or TESSERA_BACKEND_PATH is named once, not at every run.
    using log_fn = std::function<void(std::string_view)>;
    void set_log(log_fn fn);

private:
    struct dev_slot {
        tsr_device * dev;
        std::shared_ptr<detail::reg_entry> entry;
    };
    backend_reg add_entry(std::shared_ptr<detail::reg_entry> e, std::string_view what);
    // load_mu_ held. Unless `probed` (its probe passed already), the library
    // is first opened and scored in a probe process (score_probe.hpp).
    backend_reg load_locked(const std::filesystem::path & path, bool probed = false);
    // Loads from an open library handle (taken over: closed on failure).
    backend_reg load_handle(void * handle, const std::string & path);
    // load_best, with the search folders' files taken from `scan` (each
    // folder listed once, however many families are loaded from it).
    load_report load_best_in(std::string_view name, const std::filesystem::path & dir, detail::plugin_scan & scan);
    void log(std::string_view msg) const;

    mutable std::shared_mutex mu_; // guards regs_, devs_
    std::mutex load_mu_;           // serializes register/load/unload
    std::vector<std::shared_ptr<detail::reg_entry>> regs_;
    std::vector<dev_slot> devs_;
    log_fn log_;
    mutable std::set<std::string, std::less<>> logged_; // messages passed on (log); guarded by log_mu_
    mutable std::mutex log_mu_;
};

// The device init_best prefers among `devs` (GPU > IGPU > CPU; the first of
// each type); nullopt when none of those types is present.
std::optional<device> pick_best_device(const std::vector<device> & devs);

} // namespace tessera
