// llm/perplexity.cpp — see tessera/llm/perplexity.hpp. The chunking and
// scoring follow llama.cpp's perplexity tool (tools/perplexity, "perplexity"
// mode: chunks of n_ctx tokens, BOS in the first place, the second half
// scored), so its figures and these compare; the code is this project's own.
#include "tessera/llm/perplexity.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "tessera/core/error.hpp"

namespace tessera::llm {

double perplexity_totals::ppl() const {
    return n_scored == 0 ? 0.0 : std::exp(nll_sum / double(n_scored));
}

double perplexity_totals::ppl_stderr() const {
    if (n_scored < 2) return 0.0;
    const double n = double(n_scored);
    const double mean = nll_sum / n;
    const double var = std::max(0.0, nll2_sum / n - mean * mean);
    return ppl() * std::sqrt(var / (n - 1.0));
}

double token_nll(std::span<const float> logits, token_id target) {
    if (logits.empty()) throw error("token_nll: an empty row of logits");
    if (target < 0 || size_t(target) >= logits.size()) {
        throw error(fmt::format("token_nll: token {} is outside the {} logits of the row", target, logits.size()));
    }
    // The row's maximum, in the same pass as the check that every logit is
    // finite: a NaN or infinite one has no softmax, and is refused, named by
    // its column (it returned NaN, or NaN from inf - inf).
    float max = logits[0];
    for (size_t i = 0; i < logits.size(); ++i) {
        if (!std::isfinite(logits[i])) throw error(fmt::format("token_nll: logit {} of the row is {}", i, logits[i]));
        max = std::max(max, logits[i]);
    }
    double sum = 0.0;
    for (const float l : logits) sum += std::exp(double(l) - max);
    return std::log(sum) + max - double(logits[size_t(target)]);
}

perplexity_totals perplexity(session & s, const tokenizer & tok, std::span<const token_id> tokens,
                             const perplexity_params & p, const perplexity_progress & progress) {
    const uint32_t n = p.n_chunk_tokens;
    if (n < 4) throw error(fmt::format("perplexity: chunks of {} tokens are too short (at least 4)", n));
    if (n > s.n_ctx()) {
        throw error(fmt::format("perplexity: chunks of {} tokens do not fit the session's context of {}", n, s.n_ctx()));
    }
    uint64_t n_chunks = tokens.size() / n;
    if (n_chunks == 0) {
        throw error(fmt::format("perplexity: the text has {} tokens, fewer than one chunk of {} (use a smaller chunk "
                                "or a longer text)",
                                tokens.size(), n));
    }
    if (p.max_chunks != 0) n_chunks = std::min(n_chunks, p.max_chunks);
    const uint32_t first = n / 2; // rows first .. n - 2 are scored
    std::vector<token_id> chunk(n);
    perplexity_totals t;
    for (uint64_t c = 0; c < n_chunks; ++c) {
        const token_id * src = tokens.data() + c * n;
        std::copy(src, src + n, chunk.begin());
        if (tok.add_bos() && tok.bos_id() >= 0) chunk[0] = tok.bos_id();
        s.reset();
        const std::span<const float> logits = s.decode(chunk, true);
        const size_t width = logits.size() / n; // the model's vocabulary (decode checked the ids against it)
        for (uint32_t j = first; j + 1 < n; ++j) {
            const double nll = token_nll(logits.subspan(size_t(j) * width, width), src[j + 1]);
            t.nll_sum += nll;
            t.nll2_sum += nll * nll;
            ++t.n_scored;
        }
        ++t.n_chunks;
        if (progress) progress(c, n_chunks, t);
    }
    return t;
}

} // namespace tessera::llm
