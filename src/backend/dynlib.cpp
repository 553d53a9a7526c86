// backend/dynlib.cpp — dlopen/dlsym/dlclose, with the file checked first.
#include "backend/dynlib.hpp"

#include <dlfcn.h>

#include "backend/elf_check.hpp"

namespace tessera::detail {

void * dynlib_open(const std::string & path, std::string & error) {
    // A path without '/' is looked up by dlopen in the system's library
    // directories, so there is no one file to check here.
    if (path.find('/') != std::string::npos) {
        if (std::string why = check_elf_file(path); !why.empty()) {
            error = path + ": " + why; // the form of dlerror's messages
            return nullptr;
        }
    }
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
