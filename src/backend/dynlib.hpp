// backend/dynlib.hpp — opening shared libraries (dlopen on POSIX). Internal.
#pragma once

#include <string>

namespace tessera::detail {

// Opens the library at `path` (UTF-8 bytes as the OS takes them) with every
// symbol resolved now and kept local to it. Returns null and sets `error`
// to the loader's message on failure.
void * dynlib_open(const std::string & path, std::string & error);
// Address of `symbol` in the library, or null.
void * dynlib_symbol(void * handle, const char * symbol);
// Closes a handle from dynlib_open (null is ignored).
void dynlib_close(void * handle);

} // namespace tessera::detail
