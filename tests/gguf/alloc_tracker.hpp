// Test-only accounting of heap allocations made through operator new, to check
// that parsing a malformed file never allocates more than a bound.
#pragma once

#include <cstddef>

namespace tessera::test {

// Starts a measurement: the peak is reset to the bytes live right now.
void alloc_reset_peak();
// Largest increase of live heap bytes (operator new) since alloc_reset_peak().
size_t alloc_peak_since_reset();
// Largest single allocation request since alloc_reset_peak().
size_t alloc_largest_since_reset();

} // namespace tessera::test
