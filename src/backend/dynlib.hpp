// backend/dynlib.hpp — opening shared libraries (dlopen on POSIX). Internal.
#pragma once

#include <string>

namespace tessera::detail {

// Opens the library at `path` (UTF-8 bytes as the OS takes them) with every
// symbol resolved now and kept local to it. When `path` names a file (has a
// '/'), the file is first checked with check_elf_file (elf_check.hpp), so a
// truncated, damaged or foreign file is refused instead of crashing the
// process inside dlopen. Returns null and sets `error` on failure: either
// "<path>: <why check_elf_file refused it>" or the loader's message.
void * dynlib_open(const std::string & path, std::string & error);
// Address of `symbol` in the library, or null.
void * dynlib_symbol(void * handle, const char * symbol);
// Closes a handle from dynlib_open (null is ignored).
void dynlib_close(void * handle);

} // namespace tessera::detail
