// backend/dynlib.cpp — dlopen/dlsym/dlclose.
#include "backend/dynlib.hpp"

#include <dlfcn.h>

namespace tessera::detail {

void * dynlib_open(const std::string & path, std::string & error) {
    dlerror(); // clear a stale message
    // RTLD_LOCAL: each plugin's tessera_backend_init stays its own.
    void * h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
        const char * msg = dlerror();
        error = msg ? msg : "unknown loader error";
    }
    return h;
}

void * dynlib_symbol(void * handle, const char * symbol) {
    return handle ? dlsym(handle, symbol) : nullptr;
}

void dynlib_close(void * handle) {
    if (handle) dlclose(handle);
}

} // namespace tessera::detail
