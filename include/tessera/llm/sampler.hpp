// tessera/llm/sampler.hpp — choosing the next token from a logits vector.
//
// The sampler chain (class sampler) applies, in this order:
//   1. repetition penalty over the last `repeat_last_n` accepted tokens
//      (Keskar et al. 2019, "CTRL: A Conditional Transformer Language Model
//      for Controllable Generation", section 4.1, with the sign fix used in
//      practice: a positive logit is divided by the penalty, a negative one
//      multiplied, so a penalty > 1 always makes the token less likely; each
//      distinct token is penalized once however often it occurred);
//   2. temperature <= 0: greedy — the largest logit, lowest id on a tie; stop;
//   3. top-k: keep the k largest logits (Fan et al. 2018, "Hierarchical
//      Neural Story Generation");
//   4. top-p / nucleus: keep the smallest most-probable set whose probability
//      sum is >= p (Holtzman et al. 2020, "The Curious Case of Neural Text
//      Degeneration");
//   5. min-p: keep tokens whose probability is >= min_p * the largest
//      probability (Nguyen et al. 2024, "Turning Up the Heat: Min-p Sampling");
//   6. temperature: logits divided by T;
//   7. a random draw from the softmax of what is left.
// The filters 3-5 see the untempered distribution (the order llama.cpp-based
// tools use by default). Ties in logit order are broken by the lower id, so
// results never depend on the sort algorithm.
//
// Reproducibility: the draw uses std::mt19937 (fully specified by the C++
// standard) seeded from the 64-bit `seed` (see sampler_rng), turned into
// u = x * 2^-32 in [0, 1) from one 32-bit output x (no
// std::uniform_real_distribution, whose algorithm the standard leaves open).
// The same seed, logits and accepted tokens give the same tokens on every
// platform.
//
// Thread-safety: a sampler is single-threaded state; the free functions are
// pure (they only touch their arguments).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <vector>

#include "tessera/llm/tokenizer.hpp"

namespace tessera::llm {

// One candidate token: its id, current logit and (after softmax) probability.
struct token_candidate {
    token_id id;
    float logit;
    float p; // valid only after softmax(); sums to 1 over the set
};

// The working set of a sampler chain. `sorted` = items are ordered by logit,
// largest first, lower id first among equal logits.
struct candidate_set {
    std::vector<token_candidate> items;
    bool sorted = false;

    size_t size() const { return items.size(); }
};

// One candidate per logit, id = index (n_vocab = logits.size()), unsorted.
// Throws tessera::error for an empty span or a NaN / +infinity logit (naming
// its index); -infinity is allowed (a masked token).
candidate_set make_candidates(std::span<const float> logits);

// Sorts by logit descending, lower id first on ties. No-op when sorted.
void sort_candidates(candidate_set & c);

// Sorts, then sets p = exp(logit - max) / sum (sum in double precision).
// All -infinity logits give a uniform distribution.
void softmax(candidate_set & c);

// CTRL repetition penalty (see the file comment). `penalty` must be > 0;
// 1 is a no-op. Tokens of `last_tokens` that are not in the set are ignored.
// Keeps the set's order flag only if no logit changed.
void apply_repetition_penalty(candidate_set & c, std::span<const token_id> last_tokens, float penalty);

// Divides every logit by `temperature` (> 0).
void apply_temperature(candidate_set & c, float temperature);

// Keeps the k largest logits (ties by lower id); k <= 0 or k >= size: keeps
// all (but still sorts). Result is sorted.
void apply_top_k(candidate_set & c, int32_t k);

// Nucleus: after softmax, keeps the smallest prefix whose probability sum is
// >= p, but at least min_keep tokens. p >= 1: no-op. Result is sorted, p not
// renormalized.
void apply_top_p(candidate_set & c, float p, size_t min_keep = 1);

// Keeps tokens with probability >= min_p * (largest probability), at least
// min_keep. min_p <= 0: no-op. Result is sorted, p not renormalized.
void apply_min_p(candidate_set & c, float min_p, size_t min_keep = 1);

// Id of the largest logit, lowest id on a tie. Throws on an empty set.
token_id select_greedy(const candidate_set & c);
// Argmax over raw logits, lowest index on a tie. Throws on an empty span.
token_id argmax(std::span<const float> logits);

// Softmax over the set, then one draw with u = rng() * 2^-32: the first token
// (in sorted order) whose cumulative probability exceeds u. Throws on an
// empty set.
token_id select_random(candidate_set & c, std::mt19937 & rng);

// The generator of a sampler with this seed: a seed below 2^32 seeds
// std::mt19937 directly (std::mt19937(seed), the sequences of the 32-bit
// seeds this sampler took before), a larger one through
// std::seed_seq{low 32 bits, high 32 bits} (its algorithm is also fixed by
// the standard, [rand.util.seedseq]), so every 64-bit seed gives one
// reproducible sequence and the high half counts.
std::mt19937 sampler_rng(uint64_t seed);

// Settings of the chain. Defaults are the usual text-generation defaults.
struct sampler_params {
    float temperature = 0.8f;     // <= 0: greedy
    int32_t top_k = 40;           // <= 0: off
    float top_p = 0.95f;          // in [0, 1]; 1: off (0 keeps only the most probable)
    float min_p = 0.05f;          // in [0, 1]; 0: off
    float repeat_penalty = 1.0f;  // > 0; 1: off
    int32_t repeat_last_n = 64;   // >= 0 tokens of history; 0: off
    uint64_t seed = 0;            // generator seed (sampler_rng)
};

// The sampler chain. Usage per generated token:
//   token_id t = s.sample(logits);   // logits: n_vocab floats for one position
//   s.accept(t);                     // history for the repetition penalty
// Feed prompt tokens to accept() too if they should count as history.
class sampler {
public:
    // Throws tessera::error naming the parameter when temperature is NaN,
    // top_p or min_p is outside [0, 1], repeat_penalty <= 0 or
    // not finite, or repeat_last_n < 0.
    explicit sampler(const sampler_params & params);

    // Runs the chain on `logits` (n_vocab floats; not modified) and returns
    // the chosen id. Does not record it (call accept()). Throws as
    // make_candidates does.
    token_id sample(std::span<const float> logits);

    // Records `id` as the newest token of the history (keeps the last
    // repeat_last_n).
    void accept(token_id id);

    // Clears the history and reseeds the generator with params().seed.
    void reset();

    const sampler_params & params() const { return params_; }
    // The last accepted tokens, oldest first (at most repeat_last_n).
    std::vector<token_id> history() const { return {history_.begin(), history_.end()}; }

private:
    sampler_params params_;
    std::mt19937 rng_;
    std::deque<token_id> history_;
};

} // namespace tessera::llm
