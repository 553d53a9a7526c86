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
    std::vector<tsr_device *> devices; // accepted devices, in the backend's order

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
