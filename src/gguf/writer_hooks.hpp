// gguf/writer_hooks.hpp — a test's view into writer::write (writer.cpp).
// Internal.
#pragma once

namespace tessera::gguf::detail {

// Called (when set) just after writer::write has created its temporary
// file and before the file is guarded against signals, on the writing
// thread; tests raise a signal there. Null in programs.
extern void (*after_temp_created)();

} // namespace tessera::gguf::detail
