// Checks on what a model file holds, made at load or while decoding:
//   - tensors of layers at or past llama.block_count are refused at load,
//     naming the tensor and the key;
//   - weights holding NaN or Inf that make the logits non-finite stop
//     decoding with an error naming the position (library) and give exit 1
//     from `tessera run` instead of blank text;
//   - the session says how many weight matrices went to CPU_REPACK, and
//     their pages of the file mapping leave the process's resident set;
//   - a context whose KV cache and compute buffer exceed the memory limit
//     is refused before anything is allocated, naming the sizes, and a
//     failed allocation says what it was for (library and `tessera run`).
// Models are stories260K (F32, 5 layers) rewritten with gguf::writer.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "support/run_process.hpp"
#include "support/smaps.hpp"
#include "support/temp_dir.hpp"
#include "tessera/core/error.hpp"
#include "tessera/core/types.hpp"
#include "tessera/gguf/reader.hpp"
#include "tessera/gguf/writer.hpp"
#include "tessera/llm/model.hpp"
#include "tessera/llm/quantize.hpp"
#include "tessera/llm/session.hpp"
#include "support/error_of.hpp"

namespace {

using namespace tessera;
namespace fs = std::filesystem;

const std::string stories = std::string(TESSERA_SHARED_DIR) + "/models/stories260K.gguf";
const std::string tessera_bin = std::string(TESSERA_BINARY_DIR) + "/tessera";

struct temp_dir : tessera::test::temp_dir {
    temp_dir() : tessera::test::temp_dir("model_checks") {}
};

// A replacement tensor: its type and bytes.
struct tensor_bytes {
    tsr_type type;
    std::vector<uint8_t> bytes;
};

// stories260K written to `path` with each F32 tensor named in `names`
// replaced by edit(its info), every other tensor and every key copied.
void write_stories_with(const fs::path & path, std::initializer_list<std::string_view> names,
                        const std::function<tensor_bytes(const gguf::tensor_info &)> & edit) {
    const gguf::reader src(stories);
    gguf::writer w;
    w.copy_all_kv(src);
    for (const gguf::tensor_info & ti : src.tensors()) {
        if (std::find(names.begin(), names.end(), ti.name) == names.end()) {
            w.copy_tensor(src, ti.name);
            continue;
        }
        ASSERT_EQ(ti.type, TSR_TYPE_F32) << ti.name;
        tensor_bytes t = edit(ti);
        w.add_tensor(ti.name, t.type, std::span<const int64_t>(ti.ne, ti.n_dims), std::move(t.bytes));
    }
    w.write(path);
}

// The F32 tensor `ti` in Q8_0, with the F16 scale of its first block (row
// 0, elements 0..31; block_q8_0 starts with it) set to `scale_bits` when given.
tensor_bytes q8_0_of(const gguf::tensor_info & ti, std::optional<uint16_t> scale_bits = std::nullopt) {
    std::vector<uint8_t> q(row_size(TSR_TYPE_Q8_0, ti.ne[0]) * size_t(ti.ne[1]));
    llm::convert_rows(ti.name, TSR_TYPE_F32, ti.bytes(), TSR_TYPE_Q8_0, q, ti.ne[0], ti.ne[1]);
    if (scale_bits) std::memcpy(q.data(), &*scale_bits, sizeof *scale_bits);
    return {TSR_TYPE_Q8_0, std::move(q)};
}

// stories260K with blk.0.ffn_gate.weight converted to Q8_0 and the F16
// scale of its first block set to `scale_bits` (0x7E00 NaN, 0x7C00 +Inf).
// Every position then carries the bad value into the residual stream.
// Before the logits check this model generated blank text with exit 0.
void write_bad_gate_scale(const fs::path & path, uint16_t scale_bits) {
    write_stories_with(path, {"blk.0.ffn_gate.weight"}, [&](const gguf::tensor_info & ti) { return q8_0_of(ti, scale_bits); });
}

// stories260K with blk.0.attn_v.weight and blk.0.attn_output.weight in
// Q8_0, the first block scale of attn_v NaN: the NaN reaches attn_output's
// input only through the attention, and a quantized product's activations.
// (The Q8_0 activation quantizer used to skip NaN values, so this model
// generated normal text with exit 0.)
void write_bad_v_before_q8_output(const fs::path & path) {
    write_stories_with(path, {"blk.0.attn_v.weight", "blk.0.attn_output.weight"}, [](const gguf::tensor_info & ti) {
        return ti.name == "blk.0.attn_v.weight" ? q8_0_of(ti, uint16_t{0x7E00}) : q8_0_of(ti);
    });
}

// stories260K with element 0 of token `id`'s embedding row set to `v`:
// only positions holding that token go bad.
void write_bad_embedding(const fs::path & path, int64_t id, float v) {
    write_stories_with(path, {"token_embd.weight"}, [&](const gguf::tensor_info & ti) {
        std::vector<uint8_t> bytes(ti.bytes().begin(), ti.bytes().end());
        std::memcpy(bytes.data() + size_t(id * ti.ne[0]) * sizeof(float), &v, sizeof v);
        return tensor_bytes{TSR_TYPE_F32, std::move(bytes)};
    });
}

using tessera::test::error_of; // support/error_of.hpp

bool contains(const std::string & s, const std::string & needle) { return s.find(needle) != std::string::npos; }

// --- block_count ---------------------------------------------------------

// stories260K written to `path` with the u32 key `key` set to `value`,
// every tensor and other key copied.
void write_stories_with_u32(const fs::path & path, const char * key, uint32_t value) {
    const gguf::reader src(stories);
    gguf::writer w;
    w.copy_all_kv(src);
    w.set_u32(key, value);
    for (const gguf::tensor_info & ti : src.tensors()) w.copy_tensor(src, ti.name);
    w.write(path);
}

// stories260K has blk.0 .. blk.4: with block_count 4 the blk.4 tensors are
// left over; the first of them in file order is blk.4.attn_q.weight.
TEST(model_errors, tensors_past_block_count_name_the_tensor_and_the_key) {
    temp_dir d;
    for (uint32_t n : {4u, 2u}) {
        SCOPED_TRACE(n);
        const fs::path path = d / "short.gguf";
        write_stories_with_u32(path, "llama.block_count", n);
        const std::string what = error_of([&] { llm::model::load(path); });
        const std::string want = "tensor 'blk." + std::to_string(n) + ".attn_q.weight' belongs to layer " +
                                 std::to_string(n) + " but llama.block_count is " + std::to_string(n);
        EXPECT_TRUE(contains(what, want)) << what;
        EXPECT_TRUE(contains(what, "short.gguf")) << what;
    }
    // The file's own block_count loads.
    EXPECT_NO_THROW(llm::model::load(stories));
}

// A block_count past what the file's tensors can hold (48 tensors: 5
// layers of 9, token_embd, output_norm and output) is refused before any
// layer is allocated: 2^30 ran out of memory (std::bad_alloc), 2^24 took
// 1.2 GB before naming a missing tensor. 6 layers would need 56.
TEST(model_errors, block_count_the_file_cannot_hold_is_refused_first) {
    temp_dir d;
    for (uint32_t n : {6u, 1u << 24, 1u << 30}) {
        SCOPED_TRACE(n);
        const fs::path path = d / "long.gguf";
        write_stories_with_u32(path, "llama.block_count", n);
        const std::string what = error_of([&] { llm::model::load(path); });
        const std::string want = "llama.block_count " + std::to_string(n) + " needs at least " +
                                 std::to_string(uint64_t{n} * 9 + 2) +
                                 " tensors (9 a layer, token_embd, output_norm); the file has 48";
        EXPECT_TRUE(contains(what, want)) << what;
    }
}

// --- non-finite logits ---------------------------------------------------

TEST(session_errors, non_finite_logits_name_the_position) {
    temp_dir d;
    const fs::path path = d / "nan-gate.gguf";
    write_bad_gate_scale(path, 0x7E00);
    auto m = llm::model::load(path);
    llm::session_params p;
    p.n_ctx = 32;
    p.n_threads = 1;
    llm::session s(*m, p);
    const std::vector<int32_t> prompt{1, 403, 407, 261};
    const std::string what = error_of([&] { s.decode(prompt); });
    EXPECT_TRUE(contains(what, "logits at position 3 (token id 261) are not finite")) << what;
    EXPECT_TRUE(contains(what, "the model's weights or hyper-parameters hold NaN or Inf")) << what;
    EXPECT_EQ(s.n_past(), 0u); // the failed call left no positions behind
    // With every row asked for, the first bad row is named.
    const std::string all = error_of([&] { s.decode(prompt, true); });
    EXPECT_TRUE(contains(all, "logits at position 0 (token id 1) are not finite")) << all;
    EXPECT_EQ(s.n_past(), 0u);
}

// A NaN that reaches a quantized product only as an activation still
// stops decoding, with the fused attention and without.
TEST(session_errors, a_nan_activation_of_a_quantized_product_is_not_lost) {
    temp_dir d;
    const fs::path path = d / "nan-v.gguf";
    write_bad_v_before_q8_output(path);
    auto m = llm::model::load(path);
    for (bool fa : {true, false}) {
        llm::session_params p;
        p.n_ctx = 32;
        p.n_threads = 2;
        p.flash_attn = fa ? llm::session_params::flash_attn_mode::on : llm::session_params::flash_attn_mode::off;
        llm::session s(*m, p);
        const std::vector<int32_t> prompt{1, 403, 407, 261};
        const std::string what = error_of([&] { s.decode(prompt); });
        EXPECT_TRUE(contains(what, "are not finite")) << (fa ? "fused: " : "unfused: ") << what;
    }
}

// Only the token whose embedding holds Inf goes bad: the prompt decodes,
// and the step that feeds that token fails naming its position. Both
// attention paths (the unfused one reads the masked cache rows a failed
// call wrote: they must be cleared).
TEST(session_errors, non_finite_logits_at_a_later_step) {
    temp_dir d;
    const fs::path path = d / "inf-embd.gguf";
    write_bad_embedding(path, 300, std::numeric_limits<float>::infinity());
    auto m = llm::model::load(path);
    using fa_mode = llm::session_params::flash_attn_mode;
    for (const fa_mode fa : {fa_mode::on, fa_mode::off}) {
        SCOPED_TRACE(fa == fa_mode::on ? "flash attention on" : "flash attention off");
        llm::session_params p;
        p.n_ctx = 32;
        p.n_threads = 1;
        p.flash_attn = fa;
        llm::session s(*m, p);
        const std::vector<int32_t> prompt{1, 403, 407};
        const auto logits = s.decode(prompt);
        ASSERT_EQ(logits.size(), 512u);
        for (float l : logits) ASSERT_TRUE(std::isfinite(l));
        const int32_t next = 407;
        ASSERT_NO_THROW(s.decode(std::span<const int32_t>(&next, 1)));
        const int32_t bad = 300;
        const std::string what = error_of([&] { s.decode(std::span<const int32_t>(&bad, 1)); });
        EXPECT_TRUE(contains(what, "logits at position 4 (token id 300) are not finite")) << what;
        EXPECT_EQ(s.n_past(), 4u);

        // A failed call of several tokens: the first bad row is named, its
        // positions are forgotten and their cache rows cleared, so decoding
        // on from position 4 gives what a session without the failed calls
        // gives, bit for bit.
        const std::vector<int32_t> bad_batch{300, 407, 261};
        const std::string batch_what = error_of([&] { s.decode(bad_batch, true); });
        EXPECT_TRUE(contains(batch_what, "logits at position 4 (token id 300) are not finite")) << batch_what;
        ASSERT_EQ(s.n_past(), 4u);
        const int32_t good = 378;
        std::vector<float> got;
        ASSERT_NO_THROW({
            const auto after = s.decode(std::span<const int32_t>(&good, 1));
            got.assign(after.begin(), after.end());
        });
        llm::session fresh(*m, p);
        fresh.decode(prompt);
        fresh.decode(std::span<const int32_t>(&next, 1));
        const auto want = fresh.decode(std::span<const int32_t>(&good, 1));
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "logit " << i;
    }
}

// The CLI: exit 1 with the message, not exit 0 with blank text, for a NaN
// and an Inf scale, greedy and sampled.
TEST(cli_errors, non_finite_logits_exit_1) {
    if (!fs::exists(tessera_bin)) GTEST_SKIP() << "tessera not built";
    temp_dir d;
    for (uint16_t bits : {uint16_t(0x7E00), uint16_t(0x7C00)}) {
        const fs::path path = d / "bad.gguf";
        write_bad_gate_scale(path, bits);
        for (const char * temp : {"0", "0.8"}) {
            SCOPED_TRACE(std::to_string(bits) + " temp " + temp);
            const auto r = tessera::test::run_process(
                tessera_bin, {"run", "-m", path.string(), "-p", "Once upon a time", "-n", "8", "-t", "1", "--temp", temp});
            EXPECT_EQ(r.exit_code, 1) << r.err;
            EXPECT_TRUE(contains(r.err, "error: after the prompt (5 tokens): decode: the logits at position 4 "))
                << r.err;
            EXPECT_TRUE(contains(r.err, "hold NaN or Inf")) << r.err;
            EXPECT_EQ(r.out, "Once upon a time"); // the prompt only: nothing generated
        }
    }
    // A bad token met while generating: its step is named.
    const fs::path path = d / "inf-embd.gguf";
    // The greedy continuation of "Once upon a time" starts with ",", id 432
    // in this vocabulary (not in the prompt): feeding it back fails.
    write_bad_embedding(path, 432, std::numeric_limits<float>::infinity());
    const auto r = tessera::test::run_process(
        tessera_bin, {"run", "-m", path.string(), "-p", "Once upon a time", "-n", "8", "-t", "1", "--temp", "0"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_TRUE(contains(r.err, "error: after generated token 1: decode: the logits at position 5 (token id 432)"))
        << r.err;
}

// --- repacking -------------------------------------------------------------

// stories260K: 5 layers x 7 matrices + output.weight go to CPU_REPACK;
// token_embd.weight (read by GET_ROWS) stays in the file mapping.
TEST(session_repack, summary_counts_the_matrices_placed) {
    auto m = llm::model::load(stories);
    const gguf::reader r(stories);
    size_t n_matrices = 0, n_eligible = 0;
    uint64_t bytes = 0;
    for (const gguf::tensor_info & ti : r.tensors()) {
        if (ti.n_dims != 2) continue;
        ++n_matrices;
        if (ti.name == "token_embd.weight") continue;
        ++n_eligible;
        bytes += ti.size;
    }
    ASSERT_EQ(n_matrices, 37u);
    ASSERT_EQ(n_eligible, 36u);
    llm::session_params p;
    p.n_ctx = 16;
    p.n_threads = 1;
    {
        llm::session s(*m, p);
        const llm::repack_summary rs = s.repack();
        EXPECT_EQ(rs.n_repacked, n_eligible);
        EXPECT_EQ(rs.n_matrices, n_matrices);
        EXPECT_EQ(rs.bytes, bytes);
        EXPECT_TRUE(rs.requested);
    }
    p.repack = false;
    llm::session s(*m, p);
    const llm::repack_summary rs = s.repack();
    EXPECT_EQ(rs.n_repacked, 0u);
    EXPECT_EQ(rs.n_matrices, n_matrices);
    EXPECT_EQ(rs.bytes, 0u);
    EXPECT_FALSE(rs.requested);
}

// The matrices copied to CPU_REPACK are no longer read from the file
// mapping, so the session gives their pages back (gguf::mapping::release):
// at least the whole pages inside each moved tensor leave the resident set;
// with --repack off nothing does.
TEST(session_repack, the_moved_matrices_leave_the_file_mapping_resident_set) {
    const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    for (const bool repack : {true, false}) {
        SCOPED_TRACE(repack ? "repack on" : "repack off");
        auto m = llm::model::load(stories);
        const auto map = m->file().file_mapping();
        uint64_t whole_pages = 0; // pages wholly inside the moved tensors
        for (const gguf::tensor_info & ti : m->file().tensors()) {
            if (ti.n_dims != 2 || ti.name == "token_embd.weight") continue;
            const auto begin = (reinterpret_cast<uintptr_t>(ti.data) + page - 1) / page;
            const auto end = (reinterpret_cast<uintptr_t>(ti.data) + ti.size) / page;
            if (end > begin) whole_pages += end - begin;
        }
        ASSERT_GT(whole_pages, 100u); // stories260K: about 1 MiB of matrices
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < map->size(); i += page) sink = sink + map->data()[i]; // every page resident
        const long before = tessera::test::resident_kb(map->data());
        ASSERT_GT(before, 0);
        llm::session_params p;
        p.n_ctx = 16;
        p.n_threads = 1;
        p.repack = repack;
        llm::session s(*m, p);
        const long after = tessera::test::resident_kb(map->data());
        if (repack) {
            EXPECT_LE(after, before - static_cast<long>(whole_pages * page / 1024)) << before << " kB -> " << after;
            // Decoding still works from the copies (the values are checked by the reference tests).
            const std::vector<int32_t> tokens = {1, 403};
            const std::span<const float> logits = s.decode(tokens);
            ASSERT_FALSE(logits.empty());
            EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); }));
        } else {
            EXPECT_GE(after, before - 8) << before << " kB -> " << after;
        }
    }
}

// --- context memory ----------------------------------------------------------

// stories260K: 5 layers, n_embd_kv 32 (4 KV heads of 8), 8 heads, 512 tokens.
TEST(session_memory, estimate_counts_the_kv_cache_mask_scores_and_logits) {
    auto m = llm::model::load(stories);
    const llm::context_memory f32 = llm::estimate_context_memory(m->hp(), 2048, 512, TSR_TYPE_F32, true);
    EXPECT_EQ(f32.kv_cache, 2u * 5 * 32 * 2048 * 4);     // 2.5 MiB
    EXPECT_EQ(f32.compute, 2048u * 512 * 4); // the mask (4 MiB; the logits, 1 MiB, come after it is freed)
    const llm::context_memory f16 = llm::estimate_context_memory(m->hp(), 2048, 512, TSR_TYPE_F16, false);
    EXPECT_EQ(f16.kv_cache, 2u * 5 * 32 * 2048 * 2);
    EXPECT_EQ(f16.compute, 2048u * 512 * 4 + 2u * 8 * 2048 * 512 * 4); // mask, scores and softmax
    // A batch whose logits outweigh its attention: 2 tokens of 512 positions.
    EXPECT_EQ(llm::estimate_context_memory(m->hp(), 512, 2, TSR_TYPE_F32, true).compute, 2u * 512 * 4);
    EXPECT_EQ(f16.total(), f16.kv_cache + f16.compute);
    // Saturates instead of wrapping around.
    llm::hparams huge = m->hp();
    huge.n_layer = huge.n_head = huge.n_head_kv = huge.n_embd = UINT32_MAX;
    EXPECT_EQ(llm::estimate_context_memory(huge, UINT32_MAX, UINT32_MAX, TSR_TYPE_F32, false).compute, UINT64_MAX);
    // Default hparams (no heads) give no KV cache rather than a division
    // by zero (SIGFPE); the logits still count.
    llm::hparams none;
    none.n_vocab = 10;
    const llm::context_memory e = llm::estimate_context_memory(none, 64, 8, TSR_TYPE_F32, true);
    EXPECT_EQ(e.kv_cache, 0u);
    EXPECT_EQ(e.compute, 64u * 8 * 4);
    EXPECT_EQ(none.head_dim(), 0u);
}

// A limit the estimate exceeds by one byte refuses the context, naming its
// size, the estimate and the limit; the estimate itself passes.
TEST(session_memory, a_context_past_the_limit_is_refused) {
    auto m = llm::model::load(stories);
    llm::session_params p;
    p.n_ctx = 2048;
    p.n_threads = 1;
    p.flash_attn = llm::session_params::flash_attn_mode::off;
    const llm::context_memory need = llm::estimate_context_memory(m->hp(), 2048, 512, TSR_TYPE_F32, false);
    p.memory_limit = need.total();
    {
        llm::session s(*m, p);
        EXPECT_GE(s.compute_buffer_size(), need.compute); // the estimate is a lower bound
        EXPECT_EQ(s.decode(std::vector<int32_t>{1, 403}).size(), 512u);
    }
    p.memory_limit = need.total() - 1;
    EXPECT_EQ(error_of([&] { llm::session s(*m, p); }),
              "a context of 2048 tokens needs about 70.5 MiB besides the weights (KV cache 2.5 MiB: 5 layers x K and V "
              "x 32 x 2048 tokens x F32; compute buffer at least 68.0 MiB: the attention mask of 512 x 2048 positions "
              "and the attention scores), more than the memory limit (70.5 MiB); use a smaller context (-c), "
              "--kv-type F16 (half the KV cache) or a smaller batch (-b)");
    // With an F16 cache and fused attention there is less to count and to suggest.
    p.kv_type = TSR_TYPE_F16;
    p.flash_attn = llm::session_params::flash_attn_mode::on;
    p.memory_limit = 1 << 20;
    EXPECT_EQ(error_of([&] { llm::session s(*m, p); }),
              "a context of 2048 tokens needs about 5.2 MiB besides the weights (KV cache 1.2 MiB: 5 layers x K and V x "
              "32 x 2048 tokens x F16; compute buffer at least 4.0 MiB: the attention mask of 512 x 2048 positions), "
              "more than the memory limit (1.0 MiB); use a smaller context (-c) or a smaller batch (-b)");
}

// The case that filled the memory for minutes: a 16M-token context of a
// 5-layer model needs 20 GiB of KV cache and a 32 GiB mask. Refused at
// once (here against a 16 GiB limit; without one, against the machine's).
TEST(session_memory, a_16m_token_context_is_refused_at_once) {
    temp_dir d;
    write_stories_with_u32(d / "16m.gguf", "llama.context_length", 1u << 24);
    auto m = llm::model::load(d / "16m.gguf");
    llm::session_params p;
    p.n_ctx = 1u << 24;
    p.n_threads = 1;
    p.memory_limit = uint64_t(16) << 30;
    const std::string what = error_of([&] { llm::session s(*m, p); });
    EXPECT_TRUE(contains(what, "a context of 16777216 tokens needs about 52.0 GiB besides the weights (KV cache "
                               "20.0 GiB: 5 layers x K and V x 32 x 16777216 tokens x F32; compute buffer at least "
                               "32.0 GiB: the attention mask of 512 x 16777216 positions"))
        << what;
    EXPECT_TRUE(contains(what, "more than the memory limit (16.0 GiB)")) << what;
}

// `tessera run` with a context no machine holds (16M tokens in batches of
// 64K: a 4 TiB attention mask) exits 1 at once with the check's message.
// (Without -b, 52 GiB: refused on this 24 GiB machine, not on every one.)
TEST(session_memory, run_refuses_a_context_larger_than_the_memory) {
    if (!fs::exists(tessera_bin)) GTEST_SKIP() << "tessera not built";
    temp_dir d;
    const fs::path path = d / "16m.gguf";
    write_stories_with_u32(path, "llama.context_length", 1u << 24);
    tessera::test::process_options opt;
    opt.timeout_s = 60;
    const auto r = tessera::test::run_process(
        tessera_bin, {"run", "-m", path.string(), "-c", "16777216", "-b", "65536", "-p", "Once", "-n", "1", "-t", "1"}, opt);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_TRUE(contains(r.err, "error: a context of 16777216 tokens needs about 4.0 TiB besides the weights (KV cache 20.0 GiB: ")) << r.err;
    EXPECT_TRUE(contains(r.err, "compute buffer at least 4.0 TiB: the attention mask of 65536 x 16777216 positions)"))
        << r.err;
    EXPECT_TRUE(contains(r.err, "more than the machine's physical memory (")) << r.err;
    EXPECT_TRUE(contains(r.err, "use a smaller context (-c), --kv-type F16 (half the KV cache) or a smaller batch (-b)\n"))
        << r.err;
}

// `tessera bench` refusing a context no machine holds (-d 1e9: a 640 GB KV
// cache) names bench's own options, not run's -c (bench has none).
TEST(session_memory, bench_refusal_names_bench_options) {
    if (!fs::exists(tessera_bin)) GTEST_SKIP() << "tessera not built";
    temp_dir d;
    const fs::path path = d / "ctxmax.gguf";
    write_stories_with_u32(path, "llama.context_length", 1u << 30);
    tessera::test::process_options opt;
    opt.timeout_s = 60;
    const auto r = tessera::test::run_process(
        tessera_bin, {"bench", "-m", path.string(), "-p", "0", "-n", "1", "-d", "1000000000", "-r", "1", "-t", "1"}, opt);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_TRUE(contains(r.err, "a context of 1000000001 tokens needs about ")) << r.err;
    EXPECT_TRUE(contains(r.err, "use a shorter context (smaller -p, -n, -pg or -d: the context holds -d plus the "
                                "longest test) or a smaller batch (-b or -ub)\n"))
        << r.err;
    EXPECT_FALSE(contains(r.err, "(-c)")) << r.err;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool k_sanitized = true; // their shadow memory needs an unlimited address space
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
constexpr bool k_sanitized = true;
#else
constexpr bool k_sanitized = false;
#endif
#else
constexpr bool k_sanitized = false;
#endif

// The process's address space in bytes (VmSize of /proc/self/status), 0 when unknown.
uint64_t address_space_bytes() {
    std::ifstream in("/proc/self/status");
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("VmSize:", 0) == 0) return uint64_t(std::stoull(line.substr(7))) * 1024; // kB
    }
    return 0;
}

// A failed allocation names what it was for. In a child process whose
// address space is capped (RLIMIT_AS) at 768 MiB above what it uses, with
// the memory check off: the F32 KV cache of 1M tokens (1.25 GiB) fails,
// then with an F16 cache of 512K tokens (320 MiB) the compute buffer (its
// mask alone 1 GiB).
TEST(session_memory, a_failed_allocation_says_what_it_was_for) {
    if (k_sanitized) GTEST_SKIP() << "sanitizers reserve more address space than the cap";
    temp_dir d;
    write_stories_with_u32(d / "16m.gguf", "llama.context_length", 1u << 24);
    auto m = llm::model::load(d / "16m.gguf");
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        ::close(fds[0]);
        std::string out;
        try {
            llm::session_params p;
            p.n_threads = 1;
            p.memory_limit = UINT64_MAX;
            p.n_ctx = 64;
            { llm::session warm(*m, p); } // backends loaded before the cap
            const uint64_t used = address_space_bytes();
            const rlimit cap{used + (uint64_t(768) << 20), used + (uint64_t(768) << 20)};
            if (used == 0 || ::setrlimit(RLIMIT_AS, &cap) != 0) ::_exit(3);
            p.n_ctx = 1u << 20;
            out += error_of([&] { llm::session s(*m, p); }) + "\n";
            p.n_ctx = 1u << 19;
            p.kv_type = TSR_TYPE_F16;
            out += error_of([&] { llm::session s(*m, p); }) + "\n";
        } catch (...) {
            out += "unexpected exception\n";
        }
        const ssize_t n = ::write(fds[1], out.data(), out.size());
        ::_exit(n == ssize_t(out.size()) ? 0 : 4);
    }
    ::close(fds[1]);
    std::string got;
    char buf[4096];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) got.append(buf, size_t(n));
    ::close(fds[0]);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << ": " << got;
    EXPECT_TRUE(contains(got, "KV cache for a context of 1048576 tokens (1.2 GiB, F32): buffer type 'CPU': failed to "
                              "allocate 1342177280 bytes"))
        << got;
    EXPECT_TRUE(contains(got, "compute buffer for a context of 524288 tokens and batches of 512: buffer type 'CPU': "
                              "failed to allocate "))
        << got;
}

} // namespace
