// backend/elf_check.hpp — a structural check of a shared library file
// before the dynamic loader maps it. Internal.
#pragma once

#include <string>

namespace tessera::detail {

// Checks that the file at `path` (UTF-8 bytes as the OS takes them) is an
// ELF shared library this process could map without touching bytes past
// the end of the file: ELF magic, the host's class (64-bit on 64-bit
// hosts), byte order and machine, type ET_DYN, the program header table
// and every segment's file image [p_offset, p_offset + p_filesz), and the
// section header table (when e_shoff != 0) inside the file. For a 64-bit
// library it then checks, at the virtual addresses the loader will use,
// what ld.so reads, writes and calls before dlopen returns (elf_image.hpp):
// the segments' layout, the dynamic section and the tables it points at,
// every relocation's type, symbol and target, and the init/fini functions
// pointing into code. The file is read with plain reads, never mapped, so
// a truncated or corrupt file cannot crash the process here (glibc's
// dlopen dies with SIGBUS on a page past the end of the file, and with
// SIGSEGV or an assertion on a damaged dynamic section or relocation).
// Damaged machine code (zeroed .text run by a constructor) cannot be seen
// by any such check.
//
// Returns "" when the file passes, or when it cannot be opened at all (the
// caller's dlopen then reports that in its own words); else why not, one
// phrase without the path, e.g. "truncated shared library: segment 2
// (PT_LOAD) needs bytes [4096, 12288) but the file has 9000 bytes" or
// "corrupt shared library: DT_RELAENT is 16 (RELA entries of this ELF
// class are 24 bytes)".
// Never throws.
std::string check_elf_file(const std::string & path);

} // namespace tessera::detail
