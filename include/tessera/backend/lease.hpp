// tessera/backend/lease.hpp — keeps a registered backend loaded while
// objects it made (backends, buffers, thread pools) are alive.
#pragma once

#include <memory>

namespace tessera::detail {

struct reg_entry; // one registered backend library or compiled-in backend (src/backend/reg_entry.hpp)

enum class lease_kind { backend = 0, buffer = 1, other = 2 };

// A counted claim on a registered backend: every live backend, buffer or
// thread pool made through the C++ API holds one. While any exists,
// registry::unload refuses to unload that backend. Move-only; thread-safe.
class lease {
public:
    lease() = default;
    // Throws tessera::error when the backend was already unloaded.
    lease(std::shared_ptr<reg_entry> entry, lease_kind kind);
    ~lease() { reset(); }
    lease(lease && o) noexcept : entry_(std::move(o.entry_)), kind_(o.kind_) {}
    lease & operator=(lease && o) noexcept;
    lease(const lease &) = delete;
    lease & operator=(const lease &) = delete;

    // Gives the claim up (idempotent).
    void reset() noexcept;
    const std::shared_ptr<reg_entry> & entry() const { return entry_; }

private:
    std::shared_ptr<reg_entry> entry_;
    lease_kind kind_ = lease_kind::other;
};

// Throws tessera::error naming the backend when it was unloaded; a no-op
// for a null entry (objects not made through the registry).
void check_loaded(const reg_entry * entry);

} // namespace tessera::detail
