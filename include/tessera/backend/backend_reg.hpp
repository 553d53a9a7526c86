// tessera/backend/backend_reg.hpp — a registered backend family ("cpu", ...).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/backend.h"
#include "tessera/backend/device.hpp"

namespace tessera {

struct api_version {
    uint32_t major = 0;
    uint32_t minor = 0;
};

// A non-owning handle to a registered backend family. Valid while it stays
// registered: after unload, name(), path() and score() still return the
// values kept when it was loaded, and every other call throws
// tessera::error. Copyable; thread-safe.
class backend_reg {
public:
    backend_reg() = default;
    explicit backend_reg(std::shared_ptr<detail::reg_entry> entry);

    explicit operator bool() const { return entry_ != nullptr; }
    bool operator==(const backend_reg & o) const { return entry_ == o.entry_; }
    tsr_reg * get() const;

    // Family name as the backend reports it (e.g. "cpu").
    const char * name() const;
    // The API version the backend was built against.
    api_version version() const;
    // Library file it was loaded from (UTF-8); empty for a compiled-in backend.
    const std::string & path() const;
    // Score reported by tessera_backend_score when it was loaded; -1 when
    // it has none (compiled-in, or no score function).
    int score() const;

    // The devices the registry accepted from it (those get_device returned
    // and that passed validation), in the backend's order.
    std::vector<device> devices() const;

    // An extension function by name, or nullptr.
    void * proc_address(const char * name) const;
    template <class Fn> Fn proc(const char * name) const {
        return reinterpret_cast<Fn>(proc_address(name));
    }
    // (name, value) pairs from the tsr_reg_get_features extension; empty
    // when the backend has none.
    std::vector<std::pair<std::string, std::string>> features() const;

    const std::shared_ptr<detail::reg_entry> & entry() const { return entry_; }

private:
    std::shared_ptr<detail::reg_entry> entry_;
};

} // namespace tessera
