// backend/static_backends.cpp — the backends compiled into this program,
// registered in registry::global() on first use. A backend joins this list
// when its CMake option links it into tessera_backend and defines its macro.
#include "backend/registry_internal.hpp"
#include "tessera/backend/registry.hpp"

#ifdef TESSERA_CPU_STATIC
#include "tessera/backend/cpu.hpp"
#endif

namespace tessera {

namespace detail {

void register_static_backends(registry & r) {
#ifdef TESSERA_CPU_STATIC
    r.register_backend(cpu::backend_reg());
#endif
    (void)r;
}

} // namespace detail

registry & registry::global() {
    // Never destroyed: backends and buffers may outlive static destruction.
    static registry * const g = [] {
        auto * r = new registry();
        detail::register_static_backends(*r);
        return r;
    }();
    return *g;
}

} // namespace tessera
