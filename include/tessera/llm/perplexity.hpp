// tessera/llm/perplexity.hpp — a model's perplexity on a text: how well it
// predicts each next token, exp(mean negative log-likelihood), computed in
// chunks the way llama.cpp's perplexity tool computes it, so the figures of
// the two compare on the same file and text.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "tessera/llm/session.hpp"
#include "tessera/llm/tokenizer.hpp"

namespace tessera::llm {

struct perplexity_params {
    // Tokens per chunk (at least 4, at most the session's n_ctx). The text's
    // tokens are cut into consecutive chunks of this many; a last, shorter
    // rest is not scored.
    uint32_t n_chunk_tokens = 512;
    // Most chunks to score, from the start of the text; 0 = all of them.
    uint64_t max_chunks = 0;
};

// The running totals after some chunks. Each chunk is evaluated from an
// empty cache; with the model's BOS (tokenizer::add_bos) its first token is
// replaced by BOS. The tokens at chunk positions j = n/2 .. n - 2 (n =
// n_chunk_tokens) are scored: the negative log-likelihood of token j + 1
// under the softmax of row j's logits, -log softmax(l_j)[t_{j+1}], in
// double precision. So n - 1 - n/2 tokens a chunk, each seeing at least n/2
// tokens of context.
struct perplexity_totals {
    uint64_t n_chunks = 0;   // chunks scored so far
    uint64_t n_scored = 0;   // tokens scored so far
    double nll_sum = 0.0;    // sum of their negative log-likelihoods (nats)
    double nll2_sum = 0.0;   // sum of their squares
    // exp(nll_sum / n_scored); 0 before any token is scored.
    double ppl() const;
    // The standard error of ppl(): ppl() x the standard error of the mean
    // NLL, sqrt(var / (n_scored - 1)) with var the NLLs' variance (the delta
    // method: d exp(m) = exp(m) dm); 0 with fewer than 2 tokens.
    double ppl_stderr() const;
};

// Called after each chunk with the chunk's index (from 0), the number of
// chunks to score and the totals so far.
using perplexity_progress = std::function<void(uint64_t chunk, uint64_t n_chunks, const perplexity_totals &)>;

// Scores `tokens` (a text encoded with its special tokens, e.g.
// tokenizer::encode(text, true)) with `s` (reset before every chunk; left
// holding the last chunk) as described at perplexity_totals. Throws
// tessera::error when n_chunk_tokens is below 4 or above s.n_ctx(), when
// the tokens do not fill one chunk (naming both counts), and as
// session::decode does (an id outside the vocabulary, a failed compute,
// non-finite logits).
perplexity_totals perplexity(session & s, const tokenizer & tok, std::span<const token_id> tokens,
                             const perplexity_params & p, const perplexity_progress & progress = {});

// -log softmax(logits)[target] in double precision: log(sum_i exp(l_i - max))
// + max - l_target. Throws tessera::error for a target outside the row, an
// empty row, or a NaN or infinite logit (naming its column).
double token_nll(std::span<const float> logits, token_id target);

} // namespace tessera::llm
