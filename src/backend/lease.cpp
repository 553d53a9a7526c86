// backend/lease.cpp — counted claims on registered backends (lease.hpp).
#include "tessera/backend/lease.hpp"

#include <fmt/core.h>

#include "backend/dynlib.hpp"
#include "backend/reg_entry.hpp"
#include "tessera/core/error.hpp"
#include "tessera/core/printable.hpp"

namespace tessera::detail {

reg_entry::~reg_entry() { dynlib_close(handle); }

std::string reg_entry::describe() const {
    if (path.empty()) return fmt::format("backend '{}'", name);
    return fmt::format("backend '{}' ({})", name, printable_utf8(path));
}

void check_loaded(const reg_entry * e) {
    if (e != nullptr && e->unloaded.load(std::memory_order_acquire)) {
        throw error(fmt::format("{} was unloaded; its devices and buffer types can no "
                                "longer be used",
                                e->describe()));
    }
}

lease::lease(std::shared_ptr<reg_entry> entry, lease_kind kind) : kind_(kind) {
    if (entry) {
        std::lock_guard lk(entry->mu);
        if (entry->unloaded.load(std::memory_order_relaxed)) {
            throw error(fmt::format("{} was unloaded; cannot make new objects with it",
                                    entry->describe()));
        }
        ++entry->live[static_cast<int>(kind)];
    }
    entry_ = std::move(entry);
}

lease & lease::operator=(lease && o) noexcept {
    if (this != &o) {
        reset();
        entry_ = std::move(o.entry_);
        kind_ = o.kind_;
    }
    return *this;
}

void lease::reset() noexcept {
    if (entry_) {
        {
            std::lock_guard lk(entry_->mu);
            --entry_->live[static_cast<int>(kind_)];
        }
        entry_.reset(); // may close the library if the registry is gone
    }
}

} // namespace tessera::detail
