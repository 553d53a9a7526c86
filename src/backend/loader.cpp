// backend/loader.cpp — loading backend plugins from shared libraries:
// load, load_best (scoring variants), load_all, search paths (registry.hpp).
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <fmt/core.h>

#include "backend/abi.hpp"
#include "backend/dynlib.hpp"
#include "backend/names.hpp"
#include "backend/plugin_exit_guard.hpp"
#include "backend/reg_entry.hpp"
#include "backend/score_probe.hpp"
#include "backend/registry_internal.hpp"
#include "tessera/backend/registry.hpp"
#include "tessera/core/error.hpp"
#include "tessera/core/printable.hpp"

#ifndef TESSERA_PLUGIN_INSTALL_DIR
#define TESSERA_PLUGIN_INSTALL_DIR ""
#endif
#ifndef TESSERA_PLUGIN_DIR_FROM_BINDIR
#define TESSERA_PLUGIN_DIR_FROM_BINDIR ""
#endif

namespace fs = std::filesystem;

namespace tessera {

namespace {

constexpr const char * env_var = "TESSERA_BACKEND_PATH";

// Closes a library handle unless released.
struct handle_guard {
    void * h;
    ~handle_guard() { detail::dynlib_close(h); }
    void * release() { return std::exchange(h, nullptr); }
};

// "backend library '<path>'", the path made printable: a file name can hold
// newlines, escape sequences and bytes that are not UTF-8.
std::string library_what(const std::string & path) {
    return fmt::format("backend library '{}'", printable_utf8(path));
}

// The calls into a plugin while it is loaded, as plugin_exit_guard names
// them ("... called exit(0) during <call>").
constexpr const char * initializers_call = "its initializers (run by dlopen)";
constexpr const char * score_call = "tessera_backend_score()";
constexpr const char * init_call = "tessera_backend_init()";
constexpr const char * tables_call = "a call to its reg or devices";

// Why a library is refused after opening and scoring it (in a probe
// process or here), in the words of load_best's candidate list; "" when it
// is usable (scored above 0, or not probed). A library without a score
// symbol is refused as a variant only (load takes it).
std::string refusal(const detail::probe_result & r, const std::string & what) {
    switch (r.outcome) {
    case detail::probe_outcome::not_opened: return "cannot open: " + printable_utf8(r.message);
    case detail::probe_outcome::threw: return fmt::format("{}: threw an exception across the C ABI ({})", what, r.message);
    case detail::probe_outcome::died: return r.message;
    case detail::probe_outcome::no_score:
        return fmt::format("has no '{}' symbol (every variant library needs one)", TSR_BACKEND_SCORE_SYMBOL);
    case detail::probe_outcome::scored:
        return r.score > 0 ? std::string() : fmt::format("score {}: not supported on this system", r.score);
    case detail::probe_outcome::not_probed: break;
    }
    return {};
}

// Opens and scores the library at `path` in this process (where no probe
// process could run) and closes it again: a probe_result, as the probe's.
detail::probe_result score_in_process(const std::string & path) {
    const std::string what = library_what(path);
    detail::probe_result r;
    handle_guard h{nullptr};
    {
        detail::plugin_exit_guard guard(what, initializers_call);
        h.h = detail::dynlib_open(path, r.message);
    }
    if (h.h == nullptr) {
        r.outcome = detail::probe_outcome::not_opened;
        return r;
    }
    auto fn = reinterpret_cast<tsr_backend_score_fn>(detail::dynlib_symbol(h.h, TSR_BACKEND_SCORE_SYMBOL));
    if (fn == nullptr) {
        r.outcome = detail::probe_outcome::no_score;
        return r;
    }
    try {
        detail::plugin_exit_guard guard(what, score_call);
        r.score = fn();
        r.outcome = detail::probe_outcome::scored;
    } catch (...) {
        r.outcome = detail::probe_outcome::threw;
        r.message = detail::current_exception_text();
    }
    return r;
}

std::string env_path() {
    const char * v = std::getenv(env_var);
    return v ? std::string(v) : std::string();
}

bool same_file(const fs::path & a, const fs::path & b) {
    std::error_code ec;
    return fs::equivalent(a, b, ec);
}

constexpr std::string_view lib_prefix = "libtessera-";

// The family of a "libtessera-<family>[-<variant>].so" file name (prefix
// matched ignoring case, ".so" not), or "".
std::string family_of(const std::string & fname) {
    // (The prefix ends in '-' and ".so" begins with '.': they cannot overlap.)
    if (!detail::istarts_with(fname, lib_prefix) || !fname.ends_with(".so")) return {};
    std::string rest = fname.substr(lib_prefix.size(), fname.size() - lib_prefix.size() - 3);
    rest = rest.substr(0, rest.find('-'));
    return detail::valid_family_name(rest) ? rest : std::string();
}

// Names of the entries directly inside `dir`, whatever they are, sorted
// (errors: none). An entry named as a plugin that is no regular file (a
// directory, a FIFO, a link to a device, a dangling link or a loop) is
// thus considered, and refused with the loader's reason (check_elf_file:
// "not a regular file"; a FIFO is opened without waiting for a writer),
// instead of being passed over without a word. (Names are sorted as
// strings: within one folder that is the order of their paths, and much
// cheaper for thousands of files.)
std::vector<std::string> list_files(const fs::path & dir) {
    std::vector<std::string> out;
    std::error_code ec;
    fs::directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
    for (; !ec && it != fs::directory_iterator(); it.increment(ec)) out.push_back(it->path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

// A file's identity (device and inode), what fs::equivalent compares.
struct file_id {
    dev_t dev;
    ino_t ino;
    bool operator==(const file_id &) const = default;
};
struct file_id_hash {
    size_t operator()(const file_id & f) const {
        return std::hash<uint64_t>()(uint64_t(f.ino) * 0x9e3779b97f4a7c15ULL ^ uint64_t(f.dev));
    }
};

} // namespace

namespace detail {

// One search folder, listed once: its plugin file names grouped by family.
// A name is a variant of family F when it is "libtessera-F-<variant>.so"
// (prefix and F matched ignoring case, ".so" exactly, a variant of at least
// one character) and the base of F when it is "libtessera-F.so" ignoring
// case throughout; F is a valid_family_name, so it holds no '-'.
struct folder_listing {
    struct family_files {
        std::vector<std::string> variants; // file names, sorted
        std::string base;                  // the first base file name, or ""
    };
    fs::path dir;                                           // as first searched
    std::unordered_map<std::string, family_files> families; // key: family in lower case
    std::vector<std::string> named_families;                // family_of of each name, once each ignoring case, in name order

    void add(const std::string & fname) {
        if (!istarts_with(fname, lib_prefix) || fname.size() < lib_prefix.size() + 3) return;
        const std::string_view name(fname);
        const std::string_view stem = name.substr(lib_prefix.size(), name.size() - lib_prefix.size() - 3);
        const std::string_view ext = name.substr(name.size() - 3);
        const size_t dash = stem.find('-');
        if (dash == std::string_view::npos) {
            if (iequals(ext, ".so") && valid_family_name(stem)) {
                family_files & f = families[to_lower(stem)];
                if (f.base.empty()) f.base = fname;
            }
        } else if (ext == ".so" && dash + 1 < stem.size() && valid_family_name(stem.substr(0, dash))) {
            families[to_lower(stem.substr(0, dash))].variants.push_back(fname);
        }
        if (std::string fam = family_of(fname); !fam.empty() && named_lower_.insert(to_lower(fam)).second) {
            named_families.push_back(std::move(fam));
        }
    }

private:
    std::unordered_set<std::string> named_lower_;
};

// The search folders of one load_all (or load_best), each listed once, on
// first use: load_best for every family then looks its files up by family
// instead of listing every folder again (with 10,000 files, listing and
// sorting the folder for each of them took minutes).
struct plugin_scan {
    std::deque<folder_listing> folders; // (a deque: a listing stays put while more are added)
    // Libraries load_all probed for every family at once (one probe_scores
    // call: hanging variants of different families cost one time limit
    // together), by path; load_best_in probes only the others.
    std::unordered_map<std::string, probe_result> probed;

    // `dir`'s listing; a folder already listed under another spelling of
    // the same directory is not listed again.
    const folder_listing & folder(const fs::path & dir) {
        for (const auto & f : folders) {
            if (f.dir == dir) return f;
        }
        for (const auto & f : folders) {
            if (same_file(f.dir, dir)) return f;
        }
        folder_listing & l = folders.emplace_back();
        l.dir = dir;
        for (const auto & fname : list_files(dir)) l.add(fname);
        return l;
    }
};

} // namespace detail

fs::path detail::exe_dir() {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    return ec ? fs::path() : exe.parent_path();
}

std::vector<fs::path> detail::plugin_install_dirs() {
    std::vector<fs::path> out;
    const fs::path exe = exe_dir();
    if (!exe.empty() && std::string_view(TESSERA_PLUGIN_DIR_FROM_BINDIR).size() > 0) {
        out.push_back((exe / TESSERA_PLUGIN_DIR_FROM_BINDIR).lexically_normal());
    }
    const fs::path configured(TESSERA_PLUGIN_INSTALL_DIR);
    if (!configured.empty() && (out.empty() || out[0] != configured)) out.push_back(configured);
    return out;
}

const std::vector<std::string> & registry::known_names() {
    // cpu first: every run can fall back to it, and a plugin that names a
    // device like the CPU's ("CPU") must not take that name from it.
    static const std::vector<std::string> names = {"cpu",   "cuda", "hip", "sycl", "vulkan",
                                                   "opencl", "metal", "blas", "rpc"};
    return names;
}

std::vector<std::string> registry::searched_folders() const {
    std::vector<std::string> out;
    for (const auto & p : search_paths()) out.push_back(printable_utf8(p.string()));
    for (const auto & p : detail::plugin_install_dirs()) {
        std::error_code ec;
        if (!fs::is_directory(p, ec)) out.push_back(printable_utf8(p.string()) + " (missing)");
    }
    return out;
}

std::vector<fs::path> registry::search_paths(const fs::path & dir) const {
    std::vector<fs::path> out;
    auto add = [&](const fs::path & p) {
        std::error_code ec;
        if (p.empty() || !fs::is_directory(p, ec)) return;
        for (const auto & q : out) {
            if (same_file(p, q)) return;
        }
        out.push_back(p);
    };
    add(dir);
    add(fs::path(env_path()));
    add(detail::exe_dir());
    for (const auto & p : detail::plugin_install_dirs()) add(p); // (add skips those that do not exist)
    return out;
}

backend_reg registry::load(const fs::path & path) {
    std::lock_guard load_lk(load_mu_);
    return load_locked(path);
}

backend_reg registry::load_locked(const fs::path & path, bool probed) {
    const std::string p = path.string();
    std::string err;
    // dlopen looks a name without '/' up in the system's library folders:
    // a bare file name here means the file in the current folder, as any
    // relative path does (TESSERA_BACKEND_PATH=libtessera-cpu-x64.so said
    // "No such file or directory" beside that file).
    const std::string what = library_what(p);
    const std::string open_path = p.find('/') == std::string::npos ? "./" + p : p;
    if (!probed) {
        std::string note;
        const detail::probe_result r = detail::probe_scores({open_path}, detail::probe_timeout_s(), &note).at(0);
        if (!note.empty()) log(note);
        const std::string why = r.outcome == detail::probe_outcome::no_score ? std::string() : refusal(r, what);
        if (r.outcome == detail::probe_outcome::threw) throw error(why); // (it names the library)
        if (r.outcome == detail::probe_outcome::died) throw error(fmt::format("{}: {}; not loaded", what, why));
        if (!why.empty()) throw error(fmt::format("{}: {}", what, why));
    }
    void * h = nullptr;
    {
        detail::plugin_exit_guard guard(what, initializers_call);
        h = detail::dynlib_open(open_path, err);
    }
    if (h == nullptr) throw error(fmt::format("{}: cannot open: {}", what, printable_utf8(err)));
    return load_handle(h, p);
}

backend_reg registry::load_handle(void * handle, const std::string & p) {
    const std::string what = library_what(p);
    handle_guard h{handle};
    int score = -1;
    if (auto fn = reinterpret_cast<tsr_backend_score_fn>(
            detail::dynlib_symbol(h.h, TSR_BACKEND_SCORE_SYMBOL))) {
        {
            detail::plugin_exit_guard guard(what, score_call);
            score = detail::plugin_call(what, fn);
        }
        if (score <= 0) {
            throw error(fmt::format("{}: score {}: not supported on this system", what, score));
        }
    }
    auto init = reinterpret_cast<tsr_backend_init_fn>(
        detail::dynlib_symbol(h.h, TSR_BACKEND_INIT_SYMBOL));
    if (init == nullptr) {
        throw error(fmt::format("{}: has no '{}' symbol (not a tessera backend)", what,
                                TSR_BACKEND_INIT_SYMBOL));
    }
    tsr_reg * reg = nullptr;
    {
        detail::plugin_exit_guard guard(what, init_call);
        reg = detail::plugin_call(what, init);
    }
    if (reg == nullptr) throw error(fmt::format("{}: {}() returned null", what, TSR_BACKEND_INIT_SYMBOL));

    std::vector<std::string> skipped;
    std::shared_ptr<detail::reg_entry> e;
    {
        detail::plugin_exit_guard guard(what, tables_call);
        e = detail::make_entry(reg, what, skipped);
    }
    // A library named libtessera-<family>[-<variant>].so must hold that
    // family: a stray or misnamed file cannot take over another family's
    // place in load_best (e.g. win "cpu" and register something else).
    const std::string family = family_of(fs::path(p).filename().string());
    if (!family.empty() && !detail::iequals(family, e->name)) {
        throw error(fmt::format("{}: its reg is named '{}', but its file name says it holds the "
                                "'{}' backend",
                                what, e->name, family));
    }
    for (const auto & s : skipped) log(s);
    // A library without a usable device would only hide a working one.
    if (e->devices.empty()) {
        throw error(skipped.empty()
                        ? fmt::format("{}: it reports no devices (a backend library must offer at "
                                      "least one)",
                                      what)
                        : fmt::format("{}: none of its {} devices is usable", what, skipped.size()));
    }
    e->handle = h.release(); // from here the entry closes it (also if add_entry throws)
    e->path = p;
    e->score = score;
    return add_entry(std::move(e), what);
}

namespace {

// A family's variant files in the folders `dirs` (first occurrence of a
// file wins: another name or link for it is dropped), and in *base its
// base file (the first found; empty for none).
std::vector<fs::path> family_files(std::string_view name, const std::vector<fs::path> & dirs, detail::plugin_scan & scan,
                                   fs::path * base) {
    std::vector<fs::path> variants;
    const std::string key = detail::to_lower(name);
    std::unordered_set<file_id, file_id_hash> seen;
    for (const auto & d : dirs) {
        const detail::folder_listing & l = scan.folder(d);
        const auto it = l.families.find(key);
        if (it == l.families.end()) continue;
        for (const auto & fname : it->second.variants) {
            fs::path f = d / fname;
            // A file that cannot be looked at (a broken link) is never the
            // same as another, as with fs::equivalent.
            struct stat st {};
            if (::stat(f.c_str(), &st) == 0 && S_ISREG(st.st_mode) && !seen.insert({st.st_dev, st.st_ino}).second) {
                continue;
            }
            variants.push_back(std::move(f));
        }
        if (base->empty() && !it->second.base.empty()) *base = d / it->second.base;
    }
    return variants;
}

} // namespace

load_report registry::load_best(std::string_view name, const fs::path & dir) {
    detail::plugin_scan scan;
    return load_best_in(name, dir, scan);
}

load_report registry::load_best_in(std::string_view name, const fs::path & dir, detail::plugin_scan & scan) {
    if (!detail::valid_family_name(name)) {
        throw error(fmt::format("load_best: '{}' is not a backend name (1 to 64 of A-Z a-z 0-9 _)",
                                name));
    }
    std::lock_guard load_lk(load_mu_);
    load_report report;
    report.name = std::string(name);
    if (auto r = find_reg(name)) {
        report.already_registered = true;
        report.loaded = *r;
        return report;
    }

    fs::path base;
    const std::vector<fs::path> variants = family_files(name, search_paths(dir), scan, &base);

    // Score each variant in a probe process (score_probe.hpp): a variant
    // that crashes, exits or hangs while opened or scored is refused there;
    // none is opened in this process but the one loaded below. Where the
    // probe cannot run, each is opened and scored here, as before. Those
    // load_all probed already (scan.probed) are not probed again.
    std::vector<std::string> paths, to_probe;
    paths.reserve(variants.size());
    for (const auto & v : variants) {
        paths.push_back(v.string());
        if (scan.probed.count(paths.back()) == 0) to_probe.push_back(paths.back());
    }
    std::string note;
    const std::vector<detail::probe_result> fresh =
        to_probe.empty() ? std::vector<detail::probe_result>{} : detail::probe_scores(to_probe, detail::probe_timeout_s(), &note);
    if (!note.empty()) log(note);
    std::vector<detail::probe_result> probed;
    probed.reserve(paths.size());
    for (size_t i = 0, f = 0; i < paths.size(); ++i) {
        const auto it = scan.probed.find(paths[i]);
        probed.push_back(it != scan.probed.end() ? it->second : fresh.at(f++));
    }
    std::unordered_set<std::string> probe_passed;
    for (size_t i = 0; i < paths.size(); ++i) {
        load_candidate c;
        c.path = paths[i];
        const std::string what = library_what(c.path);
        const bool was_probed = probed[i].outcome != detail::probe_outcome::not_probed;
        const detail::probe_result r = was_probed ? probed[i] : score_in_process(c.path);
        if (r.outcome == detail::probe_outcome::scored) c.score = r.score; // else refused, its score unknown (-1)
        c.error = refusal(r, what);
        switch (r.outcome) {
        case detail::probe_outcome::not_opened: // e.g. a truncated or foreign file (dynlib_open checks it first)
        case detail::probe_outcome::no_score:   // e.g. another library given a plugin's name
        case detail::probe_outcome::died: log(fmt::format("{}: {}", what, c.error)); break;
        case detail::probe_outcome::threw: log(c.error); break;
        default: break;
        }
        if (c.error.empty() && was_probed) probe_passed.insert(c.path);
        report.candidates.push_back(std::move(c));
    }
    std::stable_sort(report.candidates.begin(), report.candidates.end(),
                     [](const load_candidate & a, const load_candidate & b) {
                         return a.score > b.score;
                     });

    // Load the best; if it fails, the next best.
    int winner_score = 0;
    for (auto & c : report.candidates) {
        if (c.score <= 0) continue;
        if (report.loaded) {
            c.error = c.score < winner_score
                          ? fmt::format("not chosen: score {} is below {}", c.score, winner_score)
                          : fmt::format("not chosen: same score {} as the library loaded, found earlier in the search", c.score);
            continue;
        }
        try {
            report.loaded = load_locked(fs::path(c.path), probe_passed.count(c.path) != 0);
            winner_score = c.score;
        } catch (const error & e) {
            c.error = e.what();
            log(c.error);
        }
    }
    if (!report.loaded && !base.empty()) {
        load_candidate c;
        c.path = base.string();
        try {
            report.loaded = load_locked(base);
            c.score = report.loaded.score();
        } catch (const error & e) {
            c.error = e.what();
            log(c.error);
        }
        report.candidates.push_back(std::move(c));
    }
    return report;
}

std::vector<load_report> registry::load_all(const fs::path & dir) {
    std::vector<load_report> reports;
    detail::plugin_scan scan; // each search folder is listed once for all families
    const std::string env = env_path();
    std::error_code ec;
    const fs::path ep(env);
    const bool env_file = !env.empty() && fs::is_regular_file(ep, ec);
    // A single library named by the variable is loaded first, so that it
    // takes its family's place (e.g. forces one CPU variant); load_best
    // then finds that family registered. If it cannot be loaded, the
    // family's best variant is loaded as usual.
    if (env_file) {
        bool loaded_before = false;
        for (const auto & r : regs()) loaded_before = loaded_before || (!r.path().empty() && same_file(r.path(), ep));
        if (!loaded_before) {
            load_report rep;
            load_candidate c;
            c.path = env;
            try {
                rep.loaded = load(ep);
                rep.name = rep.loaded.name();
                c.score = rep.loaded.score();
            } catch (const error & e) {
                c.error = e.what();
                log(fmt::format("{}: {}", env_var, c.error));
                // Named by the family its file name claims, else by the
                // variable, so that it is not listed under no name.
                const std::string fam = family_of(ep.filename().string());
                rep.name = fam.empty() ? std::string(env_var) : fam;
            }
            rep.candidates.push_back(std::move(c));
            reports.push_back(std::move(rep));
        }
    }
    // The families to load: the known ones, then (a folder named by the
    // variable) those only its files name. Every variant of every family
    // not loaded yet is probed in one call, so that hanging variants of
    // different families cost one time limit together, not one each.
    const bool env_dir = !env.empty() && !env_file && fs::is_directory(ep, ec);
    std::vector<std::pair<std::string, fs::path>> families; // name, and the folder load_best_in searches
    for (const auto & name : known_names()) families.emplace_back(name, dir);
    if (env_dir) {
        const auto & known = known_names();
        for (const auto & fam : scan.folder(ep).named_families) {
            const bool is_known = std::any_of(known.begin(), known.end(),
                                              [&](const std::string & k) { return detail::iequals(k, fam); });
            if (!is_known) families.emplace_back(fam, ep);
        }
    }
    {
        std::vector<std::string> all;
        std::unordered_set<std::string> listed;
        for (const auto & [name, where] : families) {
            if (!detail::valid_family_name(name) || find_reg(name)) continue;
            fs::path base;
            for (const auto & f : family_files(name, search_paths(where), scan, &base)) {
                if (listed.insert(f.string()).second) all.push_back(f.string());
            }
        }
        std::string note;
        const std::vector<detail::probe_result> probed =
            all.empty() ? std::vector<detail::probe_result>{} : detail::probe_scores(all, detail::probe_timeout_s(), &note);
        if (!note.empty()) log(note);
        for (size_t i = 0; i < all.size(); ++i) {
            if (probed[i].outcome != detail::probe_outcome::not_probed) scan.probed.emplace(all[i], probed[i]);
        }
    }
    const size_t n_known = known_names().size();
    for (size_t i = 0; i < n_known; ++i) reports.push_back(load_best_in(families[i].first, dir, scan));
    if (env.empty() || env_file) return reports;
    if (env_dir) {
        // A folder this user may not list was searched as an empty one.
        // (The iterator is closed at once: its descriptor would otherwise
        // stay open, inherited by the plugins loaded below.)
        std::error_code lec;
        (void)fs::directory_iterator(ep, lec);
        if (lec) log(fmt::format("{}='{}': cannot list the folder: {}; ignored", env_var, printable_utf8(env), lec.message()));
        // Families named only by files in that directory (each once, in
        // the order of their first file's name).
        for (size_t i = n_known; i < families.size(); ++i) reports.push_back(load_best_in(families[i].first, ep, scan));
    } else {
        log(fmt::format("{}='{}' is neither a regular file nor a directory; ignored", env_var, printable_utf8(env)));
    }
    return reports;
}

} // namespace tessera
