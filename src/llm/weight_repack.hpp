// llm/weight_repack.hpp — placing a model's matrices in a device's repacked
// weight layout (issue 6: the CPU device's "CPU_REPACK" buffer type stores
// Q8_0/Q4_0 and F16/BF16 matrices row-interleaved for its MUL_MAT kernels). Internal to
// the llm layer (used by session.cpp).
#pragma once

#include "tessera/backend/buffer.hpp"
#include "tessera/backend/buffer_type.hpp"
#include "tessera/backend/device.hpp"
#include <functional>
#include <vector>

#include "tessera/llm/model.hpp"

namespace tessera::llm {

// Name of the extra buffer type that holds repacked weights.
inline constexpr const char * k_repack_buffer_type_name = "CPU_REPACK";

// dev's "CPU_REPACK" extra buffer type, or an empty handle when it has none.
buffer_type find_repack_buffer_type(const device & dev);

// Places `weights` (MUL_MAT matrices of any type: a session's
// weight_set::mul_mat()) in a new buffer of dev's
// "CPU_REPACK" extra buffer type and copies their bytes there from the
// model file (the buffer type decides which of them it interleaves; the
// others it stores plainly). Returns an empty buffer when dev has no such
// type or no weight qualifies. Throws tessera::error when the allocation
// fails. The weights must point at their bytes in the model file before
// the call (as model::copy_weights leaves them).
// After each copy its source bytes are handed to `release` (when given):
// the session gives the file mapping's pages back (gguf::mapping::release),
// so that a model's resident memory is about its repacked copy, not the
// copy plus the mapped file.
buffer place_repacked_weights(const std::vector<tensor *> & weights, const device & dev,
                              const std::function<void(const void *, size_t)> & release = {});

} // namespace tessera::llm
