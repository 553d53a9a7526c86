// The Llama forward pass against the reference implementation's outputs in
// ../shared/reference (see its README.md for every field): logits after the
// prompt (the .f32.json files: F32 KV cache, no flash attention) and the
// greedy continuation, for 1 and 2 threads and micro-batch sizes 1 and 512.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/error.hpp"
#include "tessera/gguf/reader.hpp"
#include "tessera/gguf/writer.hpp"
#include "tessera/llm/model.hpp"
#include "tessera/llm/sampler.hpp"
#include "tessera/llm/session.hpp"
#include "tessera/llm/tokenizer.hpp"

namespace {

using namespace tessera;
namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string shared_dir = TESSERA_SHARED_DIR;

json load_reference(const std::string & name) {
    std::ifstream f(shared_dir + "/reference/" + name);
    if (!f) throw std::runtime_error("cannot open reference " + name);
    return json::parse(f);
}

std::string to_hex(const std::string & s) {
    static const char * digits = "0123456789abcdef";
    std::string out;
    for (unsigned char c : s) {
        out += digits[c >> 4];
        out += digits[c & 15];
    }
    return out;
}

struct model_case {
    const char * model_file;
    const char * reference_file;
    double logit_tolerance; // absolute, against the .f32.json last_logits
};

class reference_test : public ::testing::TestWithParam<model_case> {};

// Logits after the whole prompt, decoded as one batch, against the reference.
TEST_P(reference_test, last_logits_match) {
    const model_case mc = GetParam();
    const json ref = load_reference(mc.reference_file);
    auto m = llm::model::load(shared_dir + "/models/" + mc.model_file);
    const llm::tokenizer tok = llm::tokenizer::from_gguf(m->file());
    llm::session_params p;
    p.n_ctx = 512;
    p.n_threads = 1;
    llm::session s(*m, p);
    double worst = 0;
    for (const json & c : ref["cases"]) {
        const std::string prompt = c["prompt"];
        const auto ids = tok.encode(prompt, true, false);
        ASSERT_EQ(ids, c["prompt_ids"].get<std::vector<int32_t>>()) << prompt;
        s.reset();
        const std::span<const float> logits = s.decode(ids);
        const std::vector<float> want = c["last_logits"];
        ASSERT_EQ(logits.size(), want.size());
        double max_diff = 0;
        for (size_t i = 0; i < want.size(); ++i) max_diff = std::max(max_diff, std::fabs(double(logits[i]) - want[i]));
        EXPECT_LE(max_diff, mc.logit_tolerance) << "prompt '" << prompt << "'";
        worst = std::max(worst, max_diff);
    }
    std::printf("%s: max |logit - reference| over all prompts = %.3g\n", mc.model_file, worst);
}

// Argmax at every prompt position (all logits requested), stories only.
TEST(reference, argmax_per_position_stories) {
    const json ref = load_reference("stories260K.f32.json");
    auto m = llm::model::load(shared_dir + "/models/stories260K.gguf");
    llm::session_params p;
    p.n_ctx = 512;
    p.n_threads = 2;
    llm::session s(*m, p);
    for (const json & c : ref["cases"]) {
        const std::vector<int32_t> ids = c["prompt_ids"];
        const std::vector<int32_t> want = c["argmax_per_position"];
        const std::vector<double> margins = c["argmax_margin_per_position"];
        s.reset();
        const std::span<const float> all = s.decode(ids, true);
        ASSERT_EQ(all.size(), ids.size() * size_t(m->hp().n_vocab));
        for (size_t i = 0; i < ids.size(); ++i) {
            const int32_t got = llm::argmax(all.subspan(i * m->hp().n_vocab, m->hp().n_vocab));
            if (margins[i] < 1e-3) continue; // a near-tie: either answer is right
            EXPECT_EQ(got, want[i]) << "prompt '" << c["prompt"].get<std::string>() << "' position " << i;
        }
    }
}

struct greedy_case {
    int n_threads;
    uint32_t n_batch;
};

class greedy_test : public ::testing::TestWithParam<std::tuple<model_case, greedy_case>> {};

// Greedy continuation ids (and bytes) identical to the reference's. A step
// whose recorded margin is below the logit tolerance is a near-tie: the
// comparison stops there (README "Precision").
TEST_P(greedy_test, continuation_matches) {
    const auto [mc, gc] = GetParam();
    const json ref = load_reference(mc.reference_file);
    auto m = llm::model::load(shared_dir + "/models/" + mc.model_file);
    const llm::tokenizer tok = llm::tokenizer::from_gguf(m->file());
    llm::session_params p;
    p.n_ctx = 512;
    p.n_threads = gc.n_threads;
    p.n_batch = gc.n_batch;
    llm::session s(*m, p);
    for (const json & c : ref["cases"]) {
        const std::vector<int32_t> prompt_ids = c["prompt_ids"];
        const std::vector<int32_t> want = c["greedy_ids"];
        const std::vector<double> margins = c["greedy_margins"];
        s.reset();
        std::span<const float> logits = s.decode(prompt_ids);
        std::vector<int32_t> got;
        bool all_compared = true;
        for (size_t i = 0; i < want.size(); ++i) {
            const int32_t id = llm::argmax(logits);
            got.push_back(id);
            if (margins[i] < 2 * mc.logit_tolerance) {
                all_compared = false;
                break;
            }
            ASSERT_EQ(id, want[i]) << "prompt '" << c["prompt"].get<std::string>() << "' step " << i;
            if (tok.is_eog(id)) break;
            logits = s.decode(std::span<const int32_t>(&id, 1));
        }
        if (all_compared) {
            std::string text;
            for (int32_t id : got) text += tok.token_to_piece(id);
            EXPECT_EQ(to_hex(text), c["greedy_text_hex"].get<std::string>()) << c["prompt"].get<std::string>();
        }
    }
}

std::string greedy_name(const ::testing::TestParamInfo<std::tuple<model_case, greedy_case>> & info) {
    const model_case & mc = std::get<0>(info.param);
    const greedy_case & gc = std::get<1>(info.param);
    return std::string(mc.model_file[0] == 's' ? "stories260K" : "tiny_random") + "_t" +
           std::to_string(gc.n_threads) + "_b" + std::to_string(gc.n_batch);
}

const model_case stories{"stories260K.gguf", "stories260K.f32.json", 1e-4};
const model_case tiny{"llama-2-tiny-random.gguf", "llama-2-tiny-random.f32.json", 1e-4};

INSTANTIATE_TEST_SUITE_P(models, reference_test, ::testing::Values(stories, tiny),
                         [](const auto & info) { return info.index == 0 ? "stories260K" : "tiny_random"; });

INSTANTIATE_TEST_SUITE_P(
    models, greedy_test,
    ::testing::Combine(::testing::Values(stories, tiny),
                       ::testing::Values(greedy_case{1, 512}, greedy_case{2, 512}, greedy_case{1, 1}, greedy_case{2, 1})),
    greedy_name);

// Bad input gives a clear error, never a crash.
TEST(model_errors, missing_file) {
    try {
        llm::model::load("/nonexistent/model.gguf");
        FAIL() << "expected an error";
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find("/nonexistent/model.gguf"), std::string::npos) << e.what();
    }
}

TEST(model_errors, unsupported_architecture) {
    try {
        llm::model::load(shared_dir + "/models/mnist-fc-f32.gguf");
        FAIL() << "expected an error";
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find("unsupported architecture 'mnist-fc'"), std::string::npos) << e.what();
    }
}

TEST(model_errors, vocab_only_file_names_missing_tensor) {
    try {
        llm::model::load(shared_dir + "/vocab/ggml-vocab-llama-spm.gguf");
        FAIL() << "expected an error";
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find("missing tensor 'token_embd.weight'"), std::string::npos) << e.what();
    }
}

// A writer holding every key and tensor of src (a test then changes keys).
gguf::writer copy_of(const gguf::reader & src) {
    gguf::writer w;
    w.copy_all_kv(src);
    for (const gguf::tensor_info & ti : src.tensors()) w.copy_tensor(src, ti.name);
    return w;
}

// stories260K with one float hyper-parameter replaced: a non-finite or
// non-positive value is refused at load, naming the key and the value.
TEST(model_errors, non_finite_hyper_parameters_name_the_key) {
    const gguf::reader src(shared_dir + "/models/stories260K.gguf");
    const fs::path dir = fs::temp_directory_path() / "tessera_model_errors";
    fs::create_directories(dir);
    struct bad_value {
        std::string key;
        float v;
        std::string shown;
    };
    const float inf = std::numeric_limits<float>::infinity();
    for (const bad_value & c : {bad_value{"llama.attention.layer_norm_rms_epsilon", inf, "= inf"},
                                bad_value{"llama.attention.layer_norm_rms_epsilon", std::nanf(""), "= nan"},
                                bad_value{"llama.attention.layer_norm_rms_epsilon", -1.0f, "= -1"},
                                bad_value{"llama.rope.freq_base", inf, "= inf"},
                                bad_value{"llama.rope.freq_base", 0.0f, "= 0"}}) {
        SCOPED_TRACE(c.key + " " + c.shown);
        gguf::writer w = copy_of(src);
        w.set_f32(c.key, c.v);
        const fs::path path = dir / "bad.gguf";
        w.write(path);
        try {
            llm::model::load(path);
            FAIL() << "expected an error";
        } catch (const error & e) {
            const std::string what = e.what();
            EXPECT_NE(what.find(c.key + " " + c.shown), std::string::npos) << what;
            EXPECT_NE(what.find("positive finite"), std::string::npos) << what;
        }
    }
    fs::remove_all(dir);
}

// RoPE scaling the ROPE op does not compute (YaRN, LongRoPE, an unknown
// type) or a bad factor (negative, NaN, or so small that 1 / factor is not a
// finite float) is refused at load, naming the key or tensor;
// linear and none load, and so does Llama 3.1's rope_freqs.weight (per-pair
// frequency divisors) when it has n_rot / 2 finite values > 0.
// Loading `path` throws tessera::error with `needle` in its message.
void expect_load_error(const fs::path & path, const std::string & needle) {
    try {
        llm::model::load(path);
        ADD_FAILURE() << "expected an error containing " << needle;
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

// A model without the RMS norm's epsilon is refused, naming the key, as
// by the reference (it loaded with 1e-5 and no word).
TEST(model_errors, missing_rms_epsilon_is_named) {
    const gguf::reader src(shared_dir + "/models/stories260K.gguf");
    const fs::path dir = fs::temp_directory_path() / "tessera_no_eps";
    fs::create_directories(dir);
    gguf::writer w = copy_of(src);
    ASSERT_TRUE(w.remove("llama.attention.layer_norm_rms_epsilon"));
    w.write(dir / "m.gguf");
    expect_load_error(dir / "m.gguf", "m.gguf: missing metadata key 'llama.attention.layer_norm_rms_epsilon'");
    fs::remove_all(dir);
}

// A mixture-of-experts file (Mixtral's say architecture llama) is refused
// by name at load; an expert count of 0 is a dense model and loads.
TEST(model_errors, mixture_of_experts_is_refused_by_name) {
    const gguf::reader src(shared_dir + "/models/stories260K.gguf");
    const fs::path dir = fs::temp_directory_path() / "tessera_moe";
    fs::create_directories(dir);
    for (const uint32_t n : {8u, 2u, 0u}) {
        SCOPED_TRACE(n);
        gguf::writer w = copy_of(src);
        w.set_u32("llama.expert_count", n);
        w.write(dir / "m.gguf");
        if (n == 0) {
            EXPECT_NO_THROW(llm::model::load(dir / "m.gguf"));
            continue;
        }
        expect_load_error(dir / "m.gguf", "m.gguf: mixture-of-experts models are not supported (llama.expert_count = " +
                                              std::to_string(n) + ")");
    }
    gguf::writer w = copy_of(src);
    w.set_string("llama.expert_count", "eight");
    w.write(dir / "m.gguf");
    expect_load_error(dir / "m.gguf", "(llama.expert_count = a STRING)");
    fs::remove_all(dir);
}

TEST(model_errors, unsupported_rope_scaling_is_refused) {
    const gguf::reader src(shared_dir + "/models/stories260K.gguf");
    const fs::path dir = fs::temp_directory_path() / "tessera_rope_scaling";
    fs::create_directories(dir);
    const fs::path path = dir / "m.gguf";
    struct rope_case {
        std::string type;  // "" = no type key
        float factor;      // < -1e30: no factor key
        std::vector<float> freqs; // rope_freqs.weight's values (none: no tensor)
        std::string error; // "" = loads
        float freq_scale = 1.0f; // rope_freq_scale when it loads
    };
    const float none = -1e38f;
    const float inf = std::numeric_limits<float>::infinity();
    for (const rope_case & c : {rope_case{"yarn", 4.0f, {}, "llama.rope.scaling.type 'yarn' is not supported"},
                                rope_case{"longrope", none, {}, "'longrope' is not supported"},
                                rope_case{"bo\x01gus", none, {}, "'bo\x5cx01gus' is not supported"},
                                rope_case{"", none, {1, 1, 4.5f, 8}, ""},
                                rope_case{"", none, {1, 0, 1, 1}, "tensor 'rope_freqs.weight' [1] = 0 must be a finite number > 0"},
                                rope_case{"", none, {1, 1, inf, 1}, "tensor 'rope_freqs.weight' [2] = inf"},
                                rope_case{"", none, {1, 1, 1, -1}, "tensor 'rope_freqs.weight' [3] = -1"},
                                rope_case{"", none, {1, 1, 1, 1, 1}, "tensor 'rope_freqs.weight' has shape [5,1,1,1], expected [4,1,1,1]"},
                                rope_case{"", -2.0f, {}, "llama.rope.scaling.factor = -2 must be a finite number >= 0"},
                                rope_case{"", std::nanf(""), {}, "llama.rope.scaling.factor = nan"},
                                // 1 / factor overflows: the angles past position 0 were NaN
                                rope_case{"", 1e-40f, {}, "llama.rope.scaling.factor = 1e-40 is too small: the position "
                                                          "scale 1 / factor is not a finite float"},
                                rope_case{"linear", 3e-38f, {}, "", 1.0f / 3e-38f},
                                rope_case{"linear", 4.0f, {}, "", 0.25f},
                                rope_case{"", 2.0f, {}, "", 0.5f},
                                rope_case{"none", none, {}, ""},
                                // "none" with a factor: not scaled (as the reference; it used to be)
                                rope_case{"none", 4.0f, {}, ""},
                                rope_case{"none", std::nanf(""), {}, ""}}) {
        SCOPED_TRACE(c.type + " " + std::to_string(c.factor));
        gguf::writer w = copy_of(src);
        if (!c.type.empty()) w.set_string("llama.rope.scaling.type", c.type);
        if (c.factor > -1e30f || std::isnan(c.factor)) w.set_f32("llama.rope.scaling.factor", c.factor);
        if (!c.freqs.empty()) {
            std::vector<uint8_t> bytes(c.freqs.size() * 4);
            std::memcpy(bytes.data(), c.freqs.data(), bytes.size());
            const int64_t ne[1] = {int64_t(c.freqs.size())};
            w.add_tensor("rope_freqs.weight", TSR_TYPE_F32, ne, bytes);
        }
        w.write(path);
        if (c.error.empty()) {
            std::unique_ptr<llm::model> m;
            EXPECT_NO_THROW(m = llm::model::load(path));
            if (m) EXPECT_EQ(m->hp().rope_freq_scale, c.freq_scale);
            continue;
        }
        expect_load_error(path, c.error);
    }
    fs::remove_all(dir);
}

// A FLOAT64 key must hold a value a float can: a RoPE scaling factor of
// 1e-300 was read as 0 ("no scaling") without a word, and 1e300 has no float
// value at all; within the range, FLOAT64 keys load as floats.
TEST(model_errors, float64_keys_outside_the_float_range_are_refused) {
    const gguf::reader src(shared_dir + "/models/stories260K.gguf");
    const fs::path dir = fs::temp_directory_path() / "tessera_f64_keys";
    fs::create_directories(dir);
    const fs::path path = dir / "m.gguf";
    struct f64_case {
        std::string key;
        double v;
        std::string error; // "" = loads
    };
    for (const f64_case & c :
         {f64_case{"llama.rope.scaling.factor", 1e-300,
                   "m.gguf: metadata key 'llama.rope.scaling.factor' = 1e-300 is outside the range of a float"},
          f64_case{"llama.attention.layer_norm_rms_epsilon", 1e300,
                   "m.gguf: metadata key 'llama.attention.layer_norm_rms_epsilon' = 1e+300 is outside the range of a "
                   "float"},
          f64_case{"llama.rope.freq_base", -1e-320, "'llama.rope.freq_base' = -1e-320 is outside the range"},
          f64_case{"llama.rope.scaling.factor", 4.0, ""},
          f64_case{"llama.attention.layer_norm_rms_epsilon", 1e-6, ""}}) {
        SCOPED_TRACE(c.key);
        gguf::writer w = copy_of(src);
        w.set(c.key, gguf::value::f64(c.v));
        w.write(path);
        if (!c.error.empty()) {
            expect_load_error(path, c.error);
            continue;
        }
        std::unique_ptr<llm::model> m;
        ASSERT_NO_THROW(m = llm::model::load(path));
        if (c.key == "llama.rope.scaling.factor") EXPECT_EQ(m->hp().rope_freq_scale, 0.25f);
        if (c.key == "llama.attention.layer_norm_rms_epsilon") EXPECT_EQ(m->hp().rms_eps, 1e-6f);
    }
    fs::remove_all(dir);
}

// rope.dimension_count other than the head size (stories260K: 64 / 8 = 8)
// is refused at load, naming the key, both values and where the head size
// comes from (it ran with partial rotation before; the reference refuses
// such llama files too); the head size itself loads.
TEST(model_errors, rope_dimension_count_other_than_the_head_size_is_refused) {
    const gguf::reader src(shared_dir + "/models/stories260K.gguf");
    const fs::path dir = fs::temp_directory_path() / "tessera_rope_dims";
    fs::create_directories(dir);
    const fs::path path = dir / "m.gguf";
    for (const uint32_t n_rot : {4u, 6u, 7u, 16u, 8u}) {
        SCOPED_TRACE(n_rot);
        gguf::writer w = copy_of(src);
        w.set_u32("llama.rope.dimension_count", n_rot);
        w.write(path);
        if (n_rot == 8) {
            EXPECT_EQ(llm::model::load(path)->hp().n_rot, 8u);
            continue;
        }
        try {
            llm::model::load(path);
            ADD_FAILURE() << "expected an error";
        } catch (const error & e) {
            EXPECT_NE(std::string(e.what()).find("llama.rope.dimension_count " + std::to_string(n_rot) +
                                                 " differs from the head size 8 (embedding_length 64 / head_count 8)"),
                      std::string::npos)
                << e.what();
        }
    }
    fs::remove_all(dir);
}

// attention.key_length / value_length (the head size, where it is not
// embedding_length / head_count): stories260K (64 / 8 = 8) with the keys
// set. Its own size loads with either key; another value is refused where
// the weights' shapes no longer fit (wq is [64, 8 x key_length]), and a
// value_length other than the key head size, an odd size or rope
// dimensions other than it are refused naming the key.
TEST(model_errors, head_size_keys_are_checked) {
    const gguf::reader src(shared_dir + "/models/stories260K.gguf");
    const fs::path dir = fs::temp_directory_path() / "tessera_head_size";
    fs::create_directories(dir);
    const fs::path path = dir / "m.gguf";
    struct head_case {
        int64_t key_length, value_length, rope_dims; // < 0: key left out
        std::string error;                            // "" = loads
    };
    for (const head_case & c :
         {head_case{8, 8, -1, ""}, head_case{8, -1, -1, ""}, head_case{-1, 8, -1, ""},
          head_case{16, 16, 16, "tensor 'blk.0.attn_q.weight' has shape [64,64,1,1], expected [64,128,1,1]"},
          head_case{-1, 16, -1, "llama.attention.value_length 16 differs from the key head size 8"},
          head_case{8, 4, -1, "llama.attention.value_length 4 differs from the key head size 8"},
          head_case{7, 7, 7, "the head size 7 must be even"},
          head_case{16, 16, -1, "llama.rope.dimension_count 8 differs from the head size 16 (llama.attention.key_length)"},
          head_case{0, -1, -1, "metadata key 'llama.attention.key_length' has an out-of-range value 0 (allowed: 1..2^30)"}}) {
        SCOPED_TRACE(std::to_string(c.key_length) + " " + std::to_string(c.value_length));
        gguf::writer w = copy_of(src);
        if (c.key_length >= 0) w.set_u32("llama.attention.key_length", uint32_t(c.key_length));
        if (c.value_length >= 0) w.set_u32("llama.attention.value_length", uint32_t(c.value_length));
        if (c.rope_dims >= 0) w.set_u32("llama.rope.dimension_count", uint32_t(c.rope_dims));
        w.write(path);
        if (c.error.empty()) {
            EXPECT_EQ(llm::model::load(path)->hp().head_dim(), 8u);
            continue;
        }
        expect_load_error(path, c.error);
    }
    fs::remove_all(dir);
}

// A model with neither tokens nor a vocab_size key says that it has no
// vocabulary (it named only the vocab_size key before).
TEST(model_errors, no_vocabulary_is_named) {
    const gguf::reader src(shared_dir + "/models/stories260K.gguf");
    const fs::path dir = fs::temp_directory_path() / "tessera_no_vocab";
    fs::create_directories(dir);
    gguf::writer w = copy_of(src);
    ASSERT_TRUE(w.remove("tokenizer.ggml.tokens"));
    w.write(dir / "m.gguf");
    expect_load_error(dir / "m.gguf", "no vocabulary: neither a tokenizer.ggml.tokens array nor the key 'llama.vocab_size'");
    w.set_u32("llama.vocab_size", 512); // the size alone loads (the tokenizer is then what is missing)
    w.write(dir / "m.gguf");
    EXPECT_EQ(llm::model::load(dir / "m.gguf")->hp().n_vocab, 512u);
    // Tokens that are no array are named as such, vocab_size or not (the
    // message spoke of a missing array without one).
    for (const bool with_size : {true, false}) {
        if (!with_size) ASSERT_TRUE(w.remove("llama.vocab_size"));
        w.set_string("tokenizer.ggml.tokens", "not a list");
        w.write(dir / "m.gguf");
        expect_load_error(dir / "m.gguf", "m.gguf: tokenizer.ggml.tokens is a STRING, expected an ARRAY of STRING");
    }
    fs::remove_all(dir);
}

// A vocab_size key that disagrees with the tokens array is refused at load:
// with vocab_size 512 (the embedding's rows) and 300 tokens, `run` printed
// text, then failed mid-generation with "token id 419 is outside the
// vocabulary [0, 300)"; with more tokens than rows a prompt naming one of
// the extra tokens failed in decode.
TEST(model_errors, vocab_size_disagreeing_with_the_tokens_is_refused) {
    const gguf::reader src(shared_dir + "/models/stories260K.gguf");
    const fs::path dir = fs::temp_directory_path() / "tessera_vocab_size_mismatch";
    fs::create_directories(dir);
    gguf::writer w = copy_of(src);
    w.set_u32("llama.vocab_size", 512); // agrees: loads
    w.write(dir / "m.gguf");
    EXPECT_EQ(llm::model::load(dir / "m.gguf")->hp().n_vocab, 512u);
    // The first 300 tokens only (scores and types too): the embedding and
    // vocab_size still say 512.
    const std::vector<std::string_view> tokens = src.get_array_string("tokenizer.ggml.tokens");
    const std::vector<float> scores = src.get_array_f32("tokenizer.ggml.scores");
    const std::vector<int32_t> types = src.get_array_i32("tokenizer.ggml.token_type");
    w.set("tokenizer.ggml.tokens", gguf::value::array_string(std::span(tokens).first(300)));
    w.set("tokenizer.ggml.scores", gguf::value::array_f32(std::span(scores).first(300)));
    w.set("tokenizer.ggml.token_type", gguf::value::array_i32(std::span(types).first(300)));
    w.write(dir / "m.gguf");
    try {
        llm::model::load(dir / "m.gguf");
        ADD_FAILURE() << "expected an error";
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find("m.gguf: llama.vocab_size is 512 but tokenizer.ggml.tokens has 300 "
                                             "entries (they must agree)"),
                  std::string::npos)
            << e.what();
    }
    fs::remove_all(dir);
}

TEST(session_errors, context_overflow_and_bad_token) {
    auto m = llm::model::load(shared_dir + "/models/stories260K.gguf");
    llm::session_params p;
    p.n_ctx = 8;
    p.n_threads = 1;
    llm::session s(*m, p);
    std::vector<int32_t> ids(9, 1);
    EXPECT_THROW(s.decode(ids), error);
    EXPECT_EQ(s.n_past(), 0u);
    std::vector<int32_t> bad{1, 512};
    EXPECT_THROW(s.decode(bad), error);
    EXPECT_EQ(s.n_past(), 0u);
    p.n_ctx = 4096; // above the model's 2048
    EXPECT_THROW(llm::session(*m, p), error);
    p.n_ctx = 8;
    p.device = "no-such-device";
    EXPECT_THROW(llm::session(*m, p), error);
}

} // namespace
