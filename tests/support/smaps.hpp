// tests/support/smaps.hpp — the kernel's count of a mapping's resident
// memory (the Rss line of its /proc/self/smaps entry), for tests that check
// pages leave the process.
#pragma once

#include <cctype>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace tessera::test {

// Resident kB of the mapping that starts at `base`, or -1 when no mapping
// starts there (or /proc is not readable).
inline long resident_kb(const void * base) {
    std::ifstream in("/proc/self/smaps");
    std::ostringstream want;
    want << std::hex << reinterpret_cast<uintptr_t>(base) << "-";
    bool inside = false;
    for (std::string line; std::getline(in, line);) {
        const size_t dash = line.find('-');
        if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) && dash != std::string::npos &&
            line.find(' ') > dash) { // a mapping's header line: "start-end perms ..."
            inside = line.rfind(want.str(), 0) == 0;
            continue;
        }
        if (inside && line.rfind("Rss:", 0) == 0) return std::stol(line.substr(4));
    }
    return -1;
}

} // namespace tessera::test
