// backend/abi.hpp — checks applied to the C tables a backend hands over
// (include/tessera/backend.h): API version, table sizes, required slots.
// Internal.
#pragma once

#include <cstddef>
#include <string>

#include "tessera/backend.h"

// The slot if the table reaches it, else nullptr (optional slots only).
#define TSR_OPT_SLOT(type, table, slot) \
    (TSR_HAS_SLOT(type, table, slot) ? (table)->slot : nullptr)

namespace tessera::detail {

// Largest table size accepted (guards against garbage in `size`).
inline constexpr size_t max_table_size = 64 * 1024;

// Each returns "" when the object is usable, else why not (one phrase,
// without the object's name, e.g. "API version 2.0 is incompatible with
// this tessera's API version 1.0 (major versions differ)").
std::string check_reg(const tsr_reg * reg);
std::string check_device(const tsr_device * dev);
std::string check_buffer_type(const tsr_buffer_type * buft);
std::string check_buffer(const tsr_buffer * buf);
std::string check_backend(const tsr_backend * be);

struct reg_entry;

// An extension function of the reg, or nullptr (reg null, invalid, or
// without get_proc_address, or get_proc_address threw: reported on stderr
// naming `entry`'s backend, see plugin_call.hpp).
void * reg_proc(tsr_reg * reg, const char * name, const reg_entry * entry);

// Safe string from a backend getter: "" for null.
inline const char * str_or_empty(const char * s) { return s ? s : ""; }

} // namespace tessera::detail
