// backend/reg_entry.hpp — what the registry keeps for one registered
// backend family (or one device registered on its own). Internal.
#pragma once

#include <array>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "tessera/backend.h"
#include "tessera/backend/lease.hpp"

namespace tessera::detail {

struct reg_entry {
    std::string name;        // the family's name (for a lone device: the device's name)
    tsr_reg * reg = nullptr; // null for a device registered on its own
    void * handle = nullptr; // the shared library (dlopen); null when compiled in
    std::string path;        // UTF-8 library path; empty when compiled in
    int score = -1;          // tessera_backend_score's result; -1 when none
    // An accepted device with its name and description, read once at load:
    // a backend's getters are not asked again (one that returned NULL on a
    // later call crashed the registry).
    struct device_rec {
        tsr_device * dev = nullptr;
        std::string name;        // valid_device_name (names.hpp)
        std::string description; // at most max_description bytes; "" for NULL
    };
    static constexpr size_t max_description = 256;
    std::vector<device_rec> devices; // accepted devices, in the backend's order

    // The record of `d`, or nullptr when it is not one of `devices`.
    const device_rec * find(const tsr_device * d) const {
        for (const auto & r : devices) {
            if (r.dev == d) return &r;
        }
        return nullptr;
    }

    // Live objects made through it (indexed by lease_kind), and whether it
    // was unloaded; guarded by mu.
    std::mutex mu;
    std::array<int, 3> live{};
    std::atomic<bool> unloaded{false};

    reg_entry() = default;
    reg_entry(const reg_entry &) = delete;
    reg_entry & operator=(const reg_entry &) = delete;
    // Closes the library if the registry has not (its last object outlived
    // the registry).
    ~reg_entry();

    // "backend 'cpu'" or "backend 'cpu' (/path/libtessera-cpu-haswell.so)".
    std::string describe() const;
};

} // namespace tessera::detail
