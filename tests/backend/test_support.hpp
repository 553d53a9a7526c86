// tests/backend/test_support.hpp — helpers shared by the backend tests:
// fake plugin paths, temporary directories, registry snapshots, log capture.
#pragma once

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/backend/registry.hpp"
#include "tessera/core/error.hpp"
#include "support/error_of.hpp" // error_of, in this namespace

namespace tessera::test {

namespace fs = std::filesystem;

// build/tests/fake_plugins/<case>/<stem>.so
// The value of feature `name` that r lists (tsr_reg_get_features), or
// "(absent)".
inline std::string feature(const backend_reg & r, const std::string & name) {
    for (const auto & [k, v] : r.features()) {
        if (k == name) return v;
    }
    return "(absent)";
}

inline fs::path fake_plugin(const std::string & case_dir, const std::string & stem) {
    return fs::path(TESSERA_FAKE_PLUGIN_DIR) / case_dir / (stem + ".so");
}
inline fs::path fake_dir(const std::string & case_dir) {
    return fs::path(TESSERA_FAKE_PLUGIN_DIR) / case_dir;
}

// A fresh directory under the system temp dir, removed on destruction.
class temp_dir {
public:
    explicit temp_dir(const std::string & leaf = "") {
        static std::atomic<int> counter{0};
        root_ = fs::temp_directory_path() /
                ("tessera-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
        path_ = leaf.empty() ? root_ : root_ / leaf;
        fs::create_directories(path_);
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(root_, ec);
    }
    const fs::path & path() const { return path_; }

private:
    fs::path root_, path_;
};

// True when the library file is mapped into this process (by path).
inline bool is_loaded(const fs::path & lib) {
    void * h = dlopen(lib.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (h != nullptr) dlclose(h);
    std::ifstream maps("/proc/self/maps");
    std::stringstream ss;
    ss << maps.rdbuf();
    const bool mapped = ss.str().find(lib.string()) != std::string::npos;
    return h != nullptr || mapped;
}

// Everything observable about a registry, as one string per item.
inline std::vector<std::string> snapshot(const registry & r) {
    std::vector<std::string> out;
    for (const auto & g : r.regs()) {
        out.push_back("reg " + std::string(g.name()) + " " + g.path() + " " + std::to_string(g.score()));
    }
    for (const auto & d : r.devices()) out.push_back("dev " + std::string(d.name()));
    return out;
}

// Collects a registry's log lines.
struct log_capture {
    std::mutex mu;
    std::vector<std::string> lines;
    void attach(registry & r) {
        r.set_log([this](std::string_view s) {
            std::lock_guard lk(mu);
            lines.emplace_back(s);
        });
    }
    std::string all() {
        std::lock_guard lk(mu);
        std::string s;
        for (const auto & l : lines) s += l + "\n";
        return s;
    }
};

} // namespace tessera::test
