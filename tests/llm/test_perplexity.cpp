// llm::perplexity and `tessera perplexity`: the figures of the reference
// implementation's perplexity tool on the same model and text
// (perplexity_text.hpp), the totals against a naive long-double
// recomputation from the session's logits, token_nll on exact values, and
// the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "perplexity_text.hpp"
#include "support/error_of.hpp"
#include "support/run_process.hpp"
#include "support/temp_dir.hpp"
#include "tessera/core/error.hpp"
#include "tessera/llm/file_type.hpp"
#include "tessera/llm/model.hpp"
#include "tessera/llm/perplexity.hpp"
#include "tessera/llm/quantize.hpp"
#include "tessera/llm/session.hpp"
#include "tessera/llm/synth.hpp"
#include "tessera/llm/tokenizer.hpp"

namespace {

using namespace tessera;
const std::string shared_dir = TESSERA_SHARED_DIR;
const std::string tessera_bin = std::string(TESSERA_BINARY_DIR) + "/tessera";

llm::session_params f32_params(uint32_t n_ctx) {
    llm::session_params p;
    p.n_ctx = n_ctx;
    p.n_threads = 1;
    p.kv_type = TSR_TYPE_F32;
    return p;
}

TEST(Perplexity, TokenNllOfExactRows) {
    const std::vector<float> flat(4, 0.0f); // uniform over 4: -log(1/4)
    EXPECT_DOUBLE_EQ(llm::token_nll(flat, 2), std::log(4.0));
    // exp(1000) overflows a double: the row's maximum is taken out first.
    const std::vector<float> wide = {1000.0f, 0.0f};
    EXPECT_NEAR(llm::token_nll(wide, 1), 1000.0, 1e-9);
    EXPECT_NEAR(llm::token_nll(wide, 0), std::log1p(std::exp(-1000.0)), 1e-300);
    const std::vector<float> three = {1.0f, 2.0f, 3.0f};
    EXPECT_NEAR(llm::token_nll(three, 0), std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 1.0, 1e-14);
    EXPECT_THROW(llm::token_nll(three, 3), error);
    EXPECT_THROW(llm::token_nll(three, -1), error);
    EXPECT_THROW(llm::token_nll(std::span<const float>(), 0), error);
    // A NaN or infinite logit is named (it returned NaN).
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(test::error_of([&] { llm::token_nll(std::vector<float>{1.0f, std::nanf(""), 3.0f}, 0); }),
              "token_nll: logit 1 of the row is nan");
    EXPECT_EQ(test::error_of([&] { llm::token_nll(std::vector<float>{1.0f, 2.0f, inf}, 2); }),
              "token_nll: logit 2 of the row is inf");
    EXPECT_EQ(test::error_of([&] { llm::token_nll(std::vector<float>{-inf, 2.0f}, 1); }),
              "token_nll: logit 0 of the row is -inf");
}

// The same figures as llama.cpp's perplexity tool on the same file and text
// (to the 4 and 5 decimals it prints; with an F32 KV cache for
// stories260K, as the reference's closest-to-F32 run).
TEST(Perplexity, MatchesTheReferenceTool) {
    for (const auto & ref : test::k_story_references) {
        SCOPED_TRACE(std::string(ref.model) + " -c " + std::to_string(ref.n_ctx));
        auto m = llm::model::load(shared_dir + "/models/" + ref.model);
        const llm::tokenizer tok = llm::tokenizer::from_gguf(m->file());
        const std::vector<llm::token_id> tokens = tok.encode(test::k_story, true);
        llm::session s(*m, f32_params(uint32_t(ref.n_ctx)));
        llm::perplexity_params pp;
        pp.n_chunk_tokens = uint32_t(ref.n_ctx);
        std::vector<double> running;
        const llm::perplexity_totals t = llm::perplexity(s, tok, tokens, pp, [&](uint64_t c, uint64_t n, const auto & sofar) {
            EXPECT_EQ(c, running.size());
            EXPECT_EQ(n, tokens.size() / size_t(ref.n_ctx));
            running.push_back(sofar.ppl());
        });
        const uint64_t n_chunks = tokens.size() / size_t(ref.n_ctx);
        EXPECT_EQ(t.n_chunks, n_chunks);
        EXPECT_EQ(t.n_scored, n_chunks * uint64_t(ref.n_ctx - 1 - ref.n_ctx / 2));
        // The random model's F16 products take F16 activations in the
        // reference: agreement to 1e-6 relative there.
        const double tol = ref.ppl > 1000 ? ref.ppl * 1e-6 : 0.00006;
        EXPECT_NEAR(t.ppl(), ref.ppl, tol);
        EXPECT_NEAR(t.ppl_stderr(), ref.ppl_stderr, ref.ppl > 1000 ? 0.001 : 0.000006);
        if (ref.n_ctx == 128 && ref.ppl < 1000) {
            ASSERT_EQ(running.size(), std::size(test::k_story_running_128));
            for (size_t i = 0; i < running.size(); ++i) EXPECT_NEAR(running[i], test::k_story_running_128[i], 0.00006) << i;
        }
    }
}

// Quantized copies of stories260K against the reference tool's figures on
// the same bytes: a kernel that mangled a quantized type would move them by
// far more than the 0.5% allowed (Q4_0 already costs 7% against F32).
TEST(Perplexity, QuantizedModelsMatchTheReferenceTool) {
    test::temp_dir dir("pplq");
    for (const auto & ref : test::k_story_quantized_128) {
        SCOPED_TRACE(ref.type);
        const auto out = dir / (std::string(ref.type) + ".gguf");
        llm::quantize_params qp;
        qp.target = llm::parse_file_type(ref.type);
        llm::quantize_file(shared_dir + "/models/stories260K.gguf", out, qp);
        auto m = llm::model::load(out.string());
        const llm::tokenizer tok = llm::tokenizer::from_gguf(m->file());
        const std::vector<llm::token_id> tokens = tok.encode(test::k_story, true);
        llm::session s(*m, f32_params(128));
        llm::perplexity_params pp;
        pp.n_chunk_tokens = 128;
        const double ppl = llm::perplexity(s, tok, tokens, pp).ppl();
        EXPECT_NEAR(ppl, ref.ppl, 0.005 * ref.ppl);
        EXPECT_GT(ppl, 3.8197 * 0.99); // F32's 3.8197: quantizing does not help much
    }
}

// A synth model of the tiny shape, F32 weights, seed 1, with `vocab`'s
// tokenizer (and Llama 3.1's rope_freqs when llama31_rope), written into dir.
std::unique_ptr<llm::model> synth_tiny_f32(const test::temp_dir & dir, const std::string & vocab, bool llama31_rope,
                                           uint32_t head_dim = 0) {
    llm::synth_params sp;
    sp.shape = llm::synth_preset("tiny");
    sp.shape.head_dim = head_dim;
    sp.wtype = TSR_TYPE_F32;
    sp.vocab = vocab;
    sp.llama31_rope = llama31_rope;
    const auto path = dir / "tiny.gguf";
    llm::synth_model(sp, path);
    return llm::model::load(path.string());
}

// Perplexity of k_story with 128-token chunks against the reference tool's
// running estimates, final estimate and its error, each to `rel` of it.
void expect_story_perplexity(const llm::model & m, const std::vector<double> & ref_running, double ref_stderr,
                             double rel) {
    const llm::tokenizer tok = llm::tokenizer::from_gguf(m.file());
    const std::vector<llm::token_id> tokens = tok.encode(test::k_story, true);
    llm::session s(m, f32_params(128));
    llm::perplexity_params pp;
    pp.n_chunk_tokens = 128;
    std::vector<double> running;
    const llm::perplexity_totals t =
        llm::perplexity(s, tok, tokens, pp, [&](uint64_t, uint64_t, const auto & sofar) { running.push_back(sofar.ppl()); });
    ASSERT_EQ(running.size(), ref_running.size());
    for (size_t i = 0; i < running.size(); ++i) EXPECT_NEAR(running[i], ref_running[i], ref_running[i] * rel) << i;
    EXPECT_NEAR(t.ppl(), ref_running.back(), ref_running.back() * rel);
    EXPECT_NEAR(t.ppl_stderr(), ref_stderr, ref_stderr * 10 * rel);
}

// A model with a byte-level BPE vocabulary (synth_tiny_f32 with
// shared/vocab/ggml-vocab-gpt-2.gguf's tokenizer): the reference tool's
// figures on the same file, `llama-perplexity -m tiny-gpt2.gguf -f story.txt
// -c 128 -b 256 -t 1 -fa off -ctk f32 -ctv f32` (llama.cpp de3ff81). A text
// tokenized differently would give other chunks and figures.
TEST(Perplexity, ByteLevelBpeModelMatchesTheReferenceTool) {
    test::temp_dir dir("pplbpe");
    const auto m = synth_tiny_f32(dir, shared_dir + "/vocab/ggml-vocab-gpt-2.gguf", false);
    const llm::tokenizer tok = llm::tokenizer::from_gguf(m->file());
    EXPECT_EQ(tok.encode(test::k_story, true).size(), 524u); // GPT-2 adds no BOS
    expect_story_perplexity(*m, {99917.8244, 89722.6780, 87163.8417, 92953.9049}, 6002.82409, 1e-7);
}

// Llama 3.1's RoPE scaling (rope_freqs.weight): synth_tiny_f32 with
// stories260K's vocabulary and `--llama31-rope`; the reference tool's
// figures on that file (the same command line as above). Without the
// factors the same weights give 873.3757: the factors are applied.
TEST(Perplexity, Llama31RopeFactorsMatchTheReferenceTool) {
    test::temp_dir dir("pplrope");
    const auto m = synth_tiny_f32(dir, shared_dir + "/models/stories260K.gguf", true);
    ASSERT_NE(m->rope_freqs, nullptr);
    const float * f = static_cast<const float *>(m->rope_freqs->data);
    // head size 16: wavelengths 2 pi 10000^(i/8); 6283 lies between 2048 and 8192.
    const float want[8] = {1, 1, 1, 1, 1, 1, 4.68148f, 8}; // 1 / ((1 - s) / 8 + s), s = (8192 / 6283.19 - 1) / 3
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(f[i], want[i], 1e-4) << i;
    expect_story_perplexity(*m, {901.6754, 790.8854, 840.5234, 859.0962, 849.3454, 872.3814, 872.5903}, 42.56619,
                            2.5e-7);
}

// A head size given by attention.key_length instead of n_embd / n_head
// (Mistral Nemo and Small 3: 128 where 5120 / 32 = 160): synth_tiny_f32
// with stories260K's vocabulary and `--head-dim 24` (wider than 64 / 4 = 16:
// wq [64, 96], wo [96, 64]) and `--head-dim 8` (narrower); the reference
// tool's figures on those files (the command line above).
TEST(Perplexity, HeadSizeFromKeyLengthMatchesTheReferenceTool) {
    test::temp_dir dir("pplhead");
    {
        const auto m = synth_tiny_f32(dir, shared_dir + "/models/stories260K.gguf", false, 24);
        EXPECT_EQ(m->hp().head_dim(), 24u);
        EXPECT_EQ(m->layers[0].wq->ne[1], 96);
        expect_story_perplexity(*m, {905.5596, 825.2750, 849.2313, 884.6754, 897.4015, 865.2174, 872.9978}, 41.73153,
                                5e-7);
    }
    const auto m = synth_tiny_f32(dir, shared_dir + "/models/stories260K.gguf", false, 8);
    EXPECT_EQ(m->layers[0].wo->ne[0], 32);
    expect_story_perplexity(*m, {787.7977, 803.3291, 864.6710, 913.2883, 910.5587, 915.7486, 939.6939}, 46.12307, 5e-7);
}

// The totals are the sums, over chunks c and rows j = n/2 .. n - 2, of
// -log softmax(row j)[token c n + j + 1], recomputed here in long double
// from a second session's logits of the same chunks (BOS first); a
// shifted row or target, a missed BOS or a wrong count would not match.
TEST(Perplexity, TotalsAreTheNaiveSums) {
    auto m = llm::model::load(shared_dir + "/models/stories260K.gguf");
    const llm::tokenizer tok = llm::tokenizer::from_gguf(m->file());
    const std::vector<llm::token_id> tokens = tok.encode(test::k_story, true);
    constexpr uint32_t n = 37; // odd: first scored row 18, 18 rows a chunk
    llm::session s(*m, f32_params(n));
    llm::perplexity_params pp;
    pp.n_chunk_tokens = n;
    pp.max_chunks = 5;
    const llm::perplexity_totals t = llm::perplexity(s, tok, tokens, pp);
    ASSERT_EQ(t.n_chunks, 5u);
    ASSERT_EQ(t.n_scored, 5u * 18u);

    llm::session naive(*m, f32_params(n));
    long double sum = 0, sum2 = 0;
    for (size_t c = 0; c < 5; ++c) {
        std::vector<llm::token_id> chunk(tokens.begin() + long(c * n), tokens.begin() + long((c + 1) * n));
        chunk[0] = tok.bos_id();
        naive.reset();
        const std::span<const float> logits = naive.decode(chunk, true);
        const size_t V = size_t(m->hp().n_vocab);
        for (size_t j = n / 2; j + 1 < n; ++j) {
            long double z = 0;
            for (size_t v = 0; v < V; ++v) z += std::exp(static_cast<long double>(logits[j * V + v]));
            const long double nll = std::log(z) - logits[j * V + size_t(chunk[j + 1])];
            sum += nll;
            sum2 += nll * nll;
        }
    }
    EXPECT_NEAR(t.nll_sum, double(sum), 1e-9 * double(sum));
    EXPECT_NEAR(t.nll2_sum, double(sum2), 1e-9 * double(sum2));
    EXPECT_NEAR(t.ppl(), std::exp(double(sum) / 90.0), 1e-9);
    const double mean = double(sum) / 90.0, var = double(sum2) / 90.0 - mean * mean;
    EXPECT_NEAR(t.ppl_stderr(), std::exp(mean) * std::sqrt(var / 89.0), 1e-9);

    // Micro-batches of 5 tokens: the rows of every micro-batch, in order
    // (the same F32 sums up to the products' blocking).
    llm::session_params small = f32_params(n);
    small.n_batch = 5;
    llm::session batched(*m, small);
    const llm::perplexity_totals tb = llm::perplexity(batched, tok, tokens, pp);
    EXPECT_EQ(tb.n_scored, t.n_scored);
    EXPECT_NEAR(tb.nll_sum, t.nll_sum, 1e-4 * t.nll_sum);
}

TEST(Perplexity, RefusesChunksThatDoNotFit) {
    auto m = llm::model::load(shared_dir + "/models/stories260K.gguf");
    const llm::tokenizer tok = llm::tokenizer::from_gguf(m->file());
    const std::vector<llm::token_id> tokens = tok.encode("Once upon a time", true);
    llm::session s(*m, f32_params(64));
    const auto message = [&](uint32_t chunk) {
        llm::perplexity_params pp;
        pp.n_chunk_tokens = chunk;
        try {
            llm::perplexity(s, tok, tokens, pp);
        } catch (const error & e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_EQ(message(3), "perplexity: chunks of 3 tokens are too short (at least 4)");
    EXPECT_EQ(message(65), "perplexity: chunks of 65 tokens do not fit the session's context of 64");
    EXPECT_EQ(message(16), "perplexity: the text has " + std::to_string(tokens.size()) +
                               " tokens, fewer than one chunk of 16 (use a smaller chunk or a longer text)");
    EXPECT_EQ(message(4), "no error"); // 5 tokens: one chunk of 4, one token scored
}

// ---- the command ----

using test::process_result;

process_result run(const std::vector<std::string> & args) { return test::run_process(tessera_bin, args); }

TEST(PerplexityCli, PrintsTheReferenceToolsLines) {
    test::temp_dir tmp("ppl");
    const std::string text = (tmp / "story.txt").string();
    std::ofstream(text, std::ios::binary) << test::k_story;
    const process_result r = run({"perplexity", "-m", shared_dir + "/models/stories260K.gguf", "-f", text, "-c", "128",
                                  "-t", "2", "--kv-type", "f32"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "[1]3.2633,[2]3.3968,[3]3.1501,[4]3.1994,[5]3.2705,[6]3.4992,[7]3.8197,\n"
                     "Final estimate: PPL = 3.8197 +/- 0.29515\n");
    EXPECT_NE(r.err.find("perplexity: 979 tokens, 7 chunks of 128 (63 scored per chunk), CPU, 2 threads, KV cache F32"),
              std::string::npos)
        << r.err;
    // --chunks: the first chunks only.
    const process_result two = run({"perplexity", "-m", shared_dir + "/models/stories260K.gguf", "-f", text, "-c",
                                    "128", "--chunks", "2"});
    ASSERT_EQ(two.exit_code, 0) << two.err;
    EXPECT_EQ(two.out.substr(0, two.out.find('\n')), "[1]3.2633,[2]3.3968,");
}

// Special-token text in the file is plain text, as the reference tool
// tokenizes it (parse_special off): "</s>" after every line is '<', '/',
// 's', '>' there, and its figures are these. Read as the EOS token (as it
// was), the same file gave 5.7741.
TEST(PerplexityCli, SpecialTokenTextIsPlainText) {
    test::temp_dir tmp("ppl");
    std::string story = test::k_story;
    for (size_t at = story.find('\n'); at != std::string::npos; at = story.find('\n', at + 1)) story.insert(at + 1, "</s>");
    const std::string text = (tmp / "eos.txt").string();
    std::ofstream(text, std::ios::binary) << story;
    const process_result r = run({"perplexity", "-m", shared_dir + "/models/stories260K.gguf", "-f", text, "-c", "128",
                                  "-t", "1"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "[1]11.5446,[2]7.3994,[3]8.7088,[4]9.2458,[5]9.6617,[6]9.2291,[7]8.7614,\n"
                     "Final estimate: PPL = 8.7614 +/- 1.51271\n");
}

TEST(PerplexityCli, BadInputExitsOneNamingIt) {
    test::temp_dir tmp("ppl");
    const std::string model = shared_dir + "/models/stories260K.gguf";
    const std::string short_text = (tmp / "short.txt").string();
    std::ofstream(short_text) << "Once upon a time";
    struct bad_case {
        std::vector<std::string> args;
        std::string message;
    };
    const std::string missing = (tmp / "missing.txt").string();
    const std::vector<bad_case> cases = {
        {{"-f", missing}, "error: -f '" + missing + "': cannot open it: No such file or directory\n"},
        {{"-f", tmp.path.string()}, "error: -f '" + tmp.path.string() + "': cannot read it: Is a directory\n"},
        {{"-f", short_text},
         "error: -f '" + short_text + "': the text has 4 tokens (5 with BOS), fewer than one chunk of 512 (-c); use a "
                                      "smaller -c or a longer text\n"},
        // stdin is /dev/null here: BOS alone, not counted as the text's.
        {{"-f", "-"}, "error: -f '-': the text has 0 tokens (1 with BOS), fewer than one chunk of 512 (-c); use a smaller "
                      "-c or a longer text\n"},
        {{"-f", short_text, "-c", "4096"}, "error: -c 4096: longer than the model's context of 2048\n"},
        {{"-f", "/dev/zero"}, "error: -f '/dev/zero': longer than 256 MiB, the most a text file may hold here\n"},
    };
    for (const bad_case & c : cases) {
        std::vector<std::string> args = {"perplexity", "-m", model};
        args.insert(args.end(), c.args.begin(), c.args.end());
        const process_result r = run(args);
        EXPECT_EQ(r.exit_code, 1) << c.args[1];
        EXPECT_EQ(r.err, c.message);
        EXPECT_EQ(r.out, "");
    }
    // Numbers: whole, and in range (a chunk of at least 4 tokens; no
    // negative count of chunks read as "all").
    const std::vector<std::pair<std::vector<std::string>, std::string>> numbers = {
        {{"-c", "3"}, "--ctx-size: '3' is outside the range 4 to 1048576"},
        {{"-c", "1e3"}, "--ctx-size: '1e3' is not a whole number"},
        {{"--chunks", "-1"}, "--chunks: '-1' is outside the range 0 to"},
        {{"--chunks", "2x"}, "--chunks: '2x' is not a whole number"},
        // Past 64 bits: CLI11 made it the largest int64 and scored all chunks.
        {{"--chunks", "9223372036854775808"}, "--chunks: '9223372036854775808' is out of range"},
        {{"--chunks", "99999999999999999999"}, "--chunks: '99999999999999999999' is out of range"},
        {{"-t", "2.5"}, "--threads: '2.5' is not a whole number"},
    };
    for (const auto & [extra, message] : numbers) {
        std::vector<std::string> args = {"perplexity", "-m", model, "-f", short_text};
        args.insert(args.end(), extra.begin(), extra.end());
        const process_result r = run(args);
        EXPECT_EQ(r.exit_code, 1) << extra[1];
        EXPECT_EQ(r.err.rfind("error: tessera perplexity: " + message, 0), 0u) << r.err;
        EXPECT_EQ(r.out, "");
    }
}

} // namespace
