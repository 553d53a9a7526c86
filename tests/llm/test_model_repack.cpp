// Repacked weights (session_params::repack: the MUL_MAT matrices in the CPU
// device's CPU_REPACK buffer type, rows interleaved) against the plain
// layout on whole models: Q4_0, Q5_0, Q8_0 and F16 synth models of the "tiny" preset
// (64 embd, 2 layers, 4 heads, 2 KV heads, 128 ff; the shared stories260K
// is F32, which the repacked layout does not cover) with the Llama SPM
// vocabulary from ../shared/vocab (32000 tokens, so `output` is a
// [64, 32000] matrix). Checks: which weights went to CPU_REPACK (the
// layer matrices and output; never token_embd, which GET_ROWS reads), the
// logits of every prompt position and of every greedy step, the greedy
// tokens, and that destroying the session points the weights back at the
// file. A Q4_K_M model (rows of 256) checks the K-quant paths, whose logits
// must be bit-identical.
// Tolerance: the two layouts compute the same exact integer block sums and
// the same block terms; only the order in which F32 adds them differs
// (repacked: one chain per element; plain: 4 or 16 chains), a relative
// difference of a few 1e-7 per MUL_MAT that the two layers carry into the
// logits (with at most 16 blocks per row the GEMM orders even agree, so the
// prompt logits come out identical). F16 (repacked in builds with F16C):
// the GEMMs agree bit for bit, the one-token products sum the same exact
// products in another order. Measured at most 4.8e-7 on logits of
// magnitude up to ~10; the bound used is 2e-5 * (1 + |logit|).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "tessera/backend.h"
#include "tessera/backend/registry.hpp"
#include "tessera/llm/model.hpp"
#include "tessera/llm/session.hpp"
#include "tessera/llm/synth.hpp"

namespace {

using namespace tessera;
namespace fs = std::filesystem;

const std::string shared_dir = TESSERA_SHARED_DIR;

// A per-process temporary directory, removed at exit.
const fs::path & temp_dir() {
    struct holder {
        fs::path dir = fs::temp_directory_path() / ("tessera-repack-" + std::to_string(getpid()));
        holder() { fs::create_directories(dir); }
        ~holder() {
            std::error_code ec;
            fs::remove_all(dir, ec);
        }
    };
    static const holder h;
    return h.dir;
}

fs::path synth_tiny(type t) {
    const fs::path & dir = temp_dir();
    const fs::path out = dir / (std::string("tiny-") + std::string(type_name(t)) + ".gguf");
    if (!fs::exists(out)) {
        llm::synth_params p;
        p.shape = llm::synth_preset("tiny");
        p.wtype = t;
        p.vocab = shared_dir + "/vocab/ggml-vocab-llama-spm.gguf";
        p.seed = 5;
        llm::synth_model(p, out);
    }
    return out;
}

struct run_result {
    std::vector<float> prompt_logits; // every prompt position
    std::vector<float> step_logits;   // each greedy step
    std::vector<int32_t> tokens;      // greedy tokens
};

std::string buft_name(const tsr_tensor * t) {
    if (t->buffer == nullptr || t->buffer->buft == nullptr) return "(none)";
    return t->buffer->buft->iface->get_name(t->buffer->buft);
}

const std::vector<int32_t> k_prompt = {1, 450, 4996, 17354, 1701, 432, 17204, 975, 278, 17366, 11203, 29889, 13, 3};

run_result run(const llm::model & m, bool repack, int n_threads) {
    llm::session_params sp;
    sp.n_ctx = 64;
    sp.n_batch = 7; // several micro-batches: the GEMM and mat-vec paths both run
    sp.n_threads = n_threads;
    sp.repack = repack;
    llm::session s(m, sp);
    // Placement: the MUL_MAT matrices (and only they) in CPU_REPACK when on.
    const std::string want = repack ? "CPU_REPACK" : "CPU_Mapped";
    const llm::weight_set & w = s.weights();
    EXPECT_EQ(w.mul_mat().size(), m.mul_mat_weights().size());
    for (const tensor * t : w.mul_mat()) EXPECT_EQ(buft_name(t), want) << t->name;
    EXPECT_NE(buft_name(w.tok_embd), "CPU_REPACK");
    EXPECT_NE(buft_name(w.layers[0].attn_norm), "CPU_REPACK");

    run_result r;
    const auto all = s.decode(k_prompt, true);
    r.prompt_logits.assign(all.begin(), all.end());
    int32_t tok = 0;
    {
        const float * last = all.data() + (k_prompt.size() - 1) * m.hp().n_vocab;
        tok = int32_t(std::max_element(last, last + m.hp().n_vocab) - last);
    }
    for (int step = 0; step < 12; ++step) {
        r.tokens.push_back(tok);
        const auto lg = s.decode(std::vector<int32_t>{tok});
        r.step_logits.insert(r.step_logits.end(), lg.begin(), lg.end());
        tok = int32_t(std::max_element(lg.begin(), lg.end()) - lg.begin());
    }
    return r;
}

// Whether the CPU backend runs the prompt GEMMs of repacked weights on AMX
// tiles (its AMX_GEMM feature). Repacked F16 weights are then multiplied
// by activations kept to 16 bits (ops/gemm_f_amx.cpp: at most 2^-15 of
// each |w x|), not the plain GEMM's F32 values.
bool amx_gemm() {
    const auto cpu = registry::global().find_reg("CPU");
    if (!cpu) return false;
    for (const auto & [k, v] : cpu->features()) {
        if (k == "AMX_GEMM") return v == "1";
    }
    return false;
}

void expect_close(const std::vector<float> & a, const std::vector<float> & b, const char * what, double rel = 2e-5) {
    ASSERT_EQ(a.size(), b.size()) << what;
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_TRUE(std::isfinite(a[i]) && std::isfinite(b[i])) << what << " " << i;
        const double d = std::fabs(double(a[i]) - double(b[i]));
        worst = std::max(worst, d);
        ASSERT_LE(d, rel * (1.0 + std::fabs(double(b[i])))) << what << " element " << i;
    }
    std::printf("[ repack   ] %s: largest |repacked - plain| %.3g\n", what, worst);
}

class ModelRepack : public ::testing::TestWithParam<type> {};

TEST_P(ModelRepack, SameGreedyTokensAndLogitsWithRepackingOnAndOff) {
    const auto m = llm::model::load(synth_tiny(GetParam()));
    ASSERT_NE(m->output, m->tok_embd);
    for (int n_threads : {1, 2}) {
        SCOPED_TRACE("threads " + std::to_string(n_threads));
        const run_result plain = run(*m, false, n_threads);
        const run_result packed = run(*m, true, n_threads);
        EXPECT_EQ(packed.tokens, plain.tokens);
        // Greedy steps after the prompt see its K/V cache, so both carry the GEMM's rounding.
        const double rel = GetParam() == TSR_TYPE_F16 && amx_gemm() ? 2e-4 : 2e-5;
        expect_close(packed.prompt_logits, plain.prompt_logits, "prompt logits", rel);
        expect_close(packed.step_logits, plain.step_logits, "greedy-step logits", rel);
        // The logits are not all alike (the comparison means something).
        const auto [lo, hi] = std::minmax_element(plain.prompt_logits.begin(), plain.prompt_logits.end());
        EXPECT_GT(*hi - *lo, 0.1f);
    }
    // Sessions never change the model's own tensors: file bytes, no buffer.
    for (const tensor * t : m->weights()) {
        EXPECT_EQ(t->buffer, nullptr) << t->name;
        EXPECT_EQ(t->data, m->file().find_tensor(t->name)->data) << t->name;
    }
}

// Two sessions on one model, one with repacked weights and one without,
// decoding at the same time on two threads: each gives what it gives alone
// (each session places its own weight handles; the model is shared
// read-only).
TEST(ModelRepack, SessionsOnOneModelRunAtOnce) {
    const auto m = llm::model::load(synth_tiny(TSR_TYPE_Q4_0));
    const run_result plain = run(*m, false, 1);
    const run_result packed = run(*m, true, 1);
    {
        // One session's placement survives another's creation and end.
        llm::session_params sp;
        sp.n_ctx = 64;
        sp.n_batch = 7;
        sp.n_threads = 1;
        sp.repack = true;
        llm::session a(*m, sp);
        {
            sp.repack = false;
            llm::session b(*m, sp);
            for (const tensor * t : b.weights().mul_mat()) EXPECT_EQ(buft_name(t), "CPU_Mapped") << t->name;
        }
        for (const tensor * t : a.weights().mul_mat()) EXPECT_EQ(buft_name(t), "CPU_REPACK") << t->name;
        const auto all = a.decode(k_prompt, true);
        EXPECT_TRUE(std::equal(all.begin(), all.end(), packed.prompt_logits.begin(), packed.prompt_logits.end()))
            << "the repacking session computes as if it were alone";
    }
    run_result plain2, packed2;
    for (int round = 0; round < 3; ++round) {
        std::thread a([&] { plain2 = run(*m, false, 1); });
        std::thread b([&] { packed2 = run(*m, true, 1); });
        a.join();
        b.join();
        EXPECT_EQ(plain2.tokens, plain.tokens) << "round " << round;
        EXPECT_EQ(plain2.step_logits, plain.step_logits) << "round " << round;
        EXPECT_EQ(packed2.tokens, packed.tokens) << "round " << round;
        EXPECT_EQ(packed2.step_logits, packed.step_logits) << "round " << round;
    }
}

INSTANTIATE_TEST_SUITE_P(Types, ModelRepack, ::testing::Values(TSR_TYPE_Q4_0, TSR_TYPE_Q5_0, TSR_TYPE_Q8_0, TSR_TYPE_F16),
                         [](const ::testing::TestParamInfo<type> & info) { return std::string(type_name(info.param)); });

// A Q4_K_M (Q5_K_M) model: Q4_K (Q5_K) layer matrices, Q6_K attn_v /
// ffn_down / output, of a shape whose rows are whole 256-element
// super-blocks: n_embd 256, n_ff 512, 2 layers, 4 heads, 2 KV heads.
// K-quant products have the same bits on every path (vec_dot_k.hpp): the
// repacked Q4_K, Q5_K and Q6_K groups (mul_mat_k_repack.cpp, gemm_k's
// panels from the groups) and the plain rows, so the logits must be
// identical, not merely close.
struct k_mix {
    llm::file_type file_type;
    type layer_type; // the type of most layer matrices
};

class ModelRepackK : public ::testing::TestWithParam<k_mix> {};

TEST_P(ModelRepackK, LogitsAreBitIdenticalWithRepackingOnAndOff) {
    const k_mix mix = GetParam();
    const fs::path path = temp_dir() / ("k256-" + std::string(type_name(mix.layer_type)) + "_M.gguf");
    llm::synth_params p;
    p.shape = llm::synth_preset("tiny");
    p.shape.name = "k256";
    p.shape.n_embd = 256;
    p.shape.n_ff = 512;
    p.wtype = mix.file_type;
    p.vocab = shared_dir + "/vocab/ggml-vocab-llama-spm.gguf";
    p.seed = 9;
    llm::synth_model(p, path);
    const auto m = llm::model::load(path);
    int n_main = 0;
    for (const tensor * t : m->mul_mat_weights()) n_main += t->type == mix.layer_type;
    ASSERT_GE(n_main, 8) << "the layer matrices should be " << type_name(mix.layer_type);
    for (int n_threads : {1, 2}) {
        SCOPED_TRACE("threads " + std::to_string(n_threads));
        const run_result plain = run(*m, false, n_threads);
        const run_result packed = run(*m, true, n_threads);
        EXPECT_EQ(packed.tokens, plain.tokens);
        EXPECT_EQ(packed.prompt_logits, plain.prompt_logits);
        EXPECT_EQ(packed.step_logits, plain.step_logits);
        const auto [lo, hi] = std::minmax_element(plain.prompt_logits.begin(), plain.prompt_logits.end());
        EXPECT_GT(*hi - *lo, 0.1f);
    }
}

INSTANTIATE_TEST_SUITE_P(Mixes, ModelRepackK,
                         ::testing::Values(k_mix{llm::file_type_q4_k_m, TSR_TYPE_Q4_K}, k_mix{llm::file_type_q5_k_m, TSR_TYPE_Q5_K}),
                         [](const ::testing::TestParamInfo<k_mix> & info) {
                             return std::string(type_name(info.param.layer_type)) + "_M";
                         });

// A model without Q8_0/Q4_0 matrices (F32 stories260K): its MUL_MAT
// matrices still move to the CPU_REPACK buffer (stored plainly, on large
// pages), the other weights stay in the file mapping, and the logits are
// bit-identical.
TEST(ModelRepackF32, PlainMatricesGiveTheSameLogits) {
    const auto m = llm::model::load(shared_dir + "/models/stories260K.gguf");
    llm::session_params sp;
    sp.n_ctx = 32;
    sp.n_threads = 1;
    std::vector<float> a, b;
    {
        sp.repack = true;
        llm::session s(*m, sp);
        const std::vector<tensor *> mm = s.weights().mul_mat();
        ASSERT_FALSE(mm.empty());
        for (const tensor * t : s.weights().all()) {
            const bool moved = std::find(mm.begin(), mm.end(), t) != mm.end();
            EXPECT_EQ(buft_name(t) == "CPU_REPACK", moved) << t->name;
        }
        const auto l = s.decode(std::vector<int32_t>{1, 100, 200});
        a.assign(l.begin(), l.end());
    }
    {
        sp.repack = false;
        llm::session s(*m, sp);
        const auto l = s.decode(std::vector<int32_t>{1, 100, 200});
        b.assign(l.begin(), l.end());
    }
    EXPECT_EQ(a, b);
}

} // namespace
