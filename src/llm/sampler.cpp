// sampler.cpp — the sampler chain and its stages (see sampler.hpp for the
// order, the formulas and their sources).
#include "tessera/llm/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "tessera/core/error.hpp"

namespace tessera::llm {

namespace {

// Logit order: larger first, lower id first on a tie.
bool before(const token_candidate & a, const token_candidate & b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

void require_nonempty(const candidate_set & c, const char * what) {
    if (c.items.empty()) {
        throw error(fmt::format("sampler: {}: no candidate tokens", what));
    }
}

} // namespace

candidate_set make_candidates(std::span<const float> logits) {
    if (logits.empty()) {
        throw error("sampler: the logits vector is empty");
    }
    if (logits.size() > static_cast<size_t>(std::numeric_limits<token_id>::max())) {
        throw error(fmt::format("sampler: {} logits is more than a token id can index", logits.size()));
    }
    candidate_set c;
    c.items.resize(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) {
        const float l = logits[i];
        if (std::isnan(l) || l == std::numeric_limits<float>::infinity()) {
            throw error(fmt::format("sampler: logit of token {} is {}", i, l));
        }
        c.items[i] = {static_cast<token_id>(i), l, 0.0f};
    }
    return c;
}

void sort_candidates(candidate_set & c) {
    if (!c.sorted) {
        std::sort(c.items.begin(), c.items.end(), before);
        c.sorted = true;
    }
}

void softmax(candidate_set & c) {
    require_nonempty(c, "softmax");
    sort_candidates(c);
    const float max = c.items.front().logit;
    if (max == -std::numeric_limits<float>::infinity()) {
        const float u = 1.0f / static_cast<float>(c.items.size());
        for (auto & t : c.items) {
            t.p = u;
        }
        return;
    }
    double sum = 0.0;
    for (auto & t : c.items) {
        const double e = std::exp(static_cast<double>(t.logit) - max);
        t.p = static_cast<float>(e);
        sum += e;
    }
    for (auto & t : c.items) {
        t.p = static_cast<float>(t.p / sum);
    }
}

void apply_repetition_penalty(candidate_set & c, std::span<const token_id> last_tokens, float penalty) {
    if (penalty == 1.0f || last_tokens.empty()) {
        return;
    }
    if (!(penalty > 0.0f) || !std::isfinite(penalty)) {
        throw error(fmt::format("sampler: repetition penalty must be a positive finite number, got {}", penalty));
    }
    std::vector<token_id> seen(last_tokens.begin(), last_tokens.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    bool changed = false;
    for (auto & t : c.items) {
        if (!std::binary_search(seen.begin(), seen.end(), t.id)) {
            continue;
        }
        const float old = t.logit;
        t.logit = t.logit > 0.0f ? t.logit / penalty : t.logit * penalty;
        changed = changed || t.logit != old;
    }
    if (changed) {
        c.sorted = false;
    }
}

void apply_temperature(candidate_set & c, float temperature) {
    if (!(temperature > 0.0f)) {
        throw error(fmt::format("sampler: temperature must be > 0 here, got {}", temperature));
    }
    float max = -std::numeric_limits<float>::infinity();
    for (const auto & t : c.items) max = std::max(max, t.logit);
    // A temperature so small that the largest logit over it overflows to
    // +inf (e.g. 1e-38) would make the soft-max NaN: then every logit is
    // taken relative to the largest first (the same probabilities, the
    // largest at 0, the others -inf or below), so the choice is greedy
    // instead of whichever +inf comes first.
    const bool shift = std::isfinite(max) && !std::isfinite(max / temperature);
    for (auto & t : c.items) {
        t.logit = shift ? (t.logit - max) / temperature : t.logit / temperature;
    }
    // Dividing by a positive number keeps the order (ties stay ties or, for
    // values that round together, become ties that still sort by id).
    if (c.sorted) {
        c.sorted = std::is_sorted(c.items.begin(), c.items.end(), before);
    }
}

void apply_top_k(candidate_set & c, int32_t k) {
    if (k <= 0 || static_cast<size_t>(k) >= c.items.size()) {
        sort_candidates(c);
        return;
    }
    if (!c.sorted) {
        std::partial_sort(c.items.begin(), c.items.begin() + k, c.items.end(), before);
    }
    c.items.resize(static_cast<size_t>(k));
    c.sorted = true;
}

void apply_top_p(candidate_set & c, float p, size_t min_keep) {
    if (p >= 1.0f || c.items.empty()) {
        return;
    }
    softmax(c);
    double cum = 0.0;
    size_t keep = c.items.size();
    for (size_t i = 0; i < c.items.size(); ++i) {
        cum += c.items[i].p;
        if (cum >= p && i + 1 >= min_keep) {
            keep = i + 1;
            break;
        }
    }
    c.items.resize(keep);
}

void apply_min_p(candidate_set & c, float min_p, size_t min_keep) {
    if (min_p <= 0.0f || c.items.empty()) {
        return;
    }
    softmax(c);
    const float threshold = min_p * c.items.front().p;
    size_t keep = 0;
    while (keep < c.items.size() && c.items[keep].p >= threshold) {
        ++keep;
    }
    c.items.resize(std::min(c.items.size(), std::max(keep, min_keep)));
}

token_id select_greedy(const candidate_set & c) {
    require_nonempty(c, "greedy");
    if (c.sorted) {
        return c.items.front().id;
    }
    const token_candidate * best = &c.items.front();
    for (const auto & t : c.items) {
        if (before(t, *best)) {
            best = &t;
        }
    }
    return best->id;
}

token_id argmax(std::span<const float> logits) {
    if (logits.empty()) {
        throw error("sampler: argmax of an empty logits vector");
    }
    // Strictly greater keeps the lowest index on a tie.
    size_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i) {
        if (logits[i] > logits[best]) {
            best = i;
        }
    }
    return static_cast<token_id>(best);
}

token_id select_random(candidate_set & c, std::mt19937 & rng) {
    require_nonempty(c, "random draw");
    softmax(c);
    const double u = static_cast<double>(rng()) * 0x1p-32; // in [0, 1)
    double total = 0.0;
    for (const auto & t : c.items) {
        total += t.p;
    }
    const double target = u * total;
    double cum = 0.0;
    for (const auto & t : c.items) {
        cum += t.p;
        if (cum > target) {
            return t.id;
        }
    }
    // Rounding left target at or above the sum: the last token with p > 0.
    for (auto it = c.items.rbegin(); it != c.items.rend(); ++it) {
        if (it->p > 0.0f) {
            return it->id;
        }
    }
    return c.items.front().id;
}

std::mt19937 sampler_rng(uint64_t seed) {
    if (seed <= std::numeric_limits<uint32_t>::max()) return std::mt19937(static_cast<uint32_t>(seed));
    std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
    return std::mt19937(seq);
}

sampler::sampler(const sampler_params & params) : params_(params), rng_(sampler_rng(params.seed)) {
    if (std::isnan(params.temperature)) {
        throw error("sampler: temperature is NaN");
    }
    if (!(params.top_p >= 0.0f && params.top_p <= 1.0f)) {
        throw error(fmt::format("sampler: top_p must be in [0, 1], got {}", params.top_p));
    }
    if (!(params.min_p >= 0.0f && params.min_p <= 1.0f)) {
        throw error(fmt::format("sampler: min_p must be in [0, 1], got {}", params.min_p));
    }
    if (!(params.repeat_penalty > 0.0f) || !std::isfinite(params.repeat_penalty)) {
        throw error(fmt::format("sampler: repeat_penalty must be a positive finite number, got {}",
                                params.repeat_penalty));
    }
    if (params.repeat_last_n < 0) {
        throw error(fmt::format("sampler: repeat_last_n must be >= 0, got {}", params.repeat_last_n));
    }
}

token_id sampler::sample(std::span<const float> logits) {
    const bool penalize = params_.repeat_penalty != 1.0f && !history_.empty();
    if (params_.temperature <= 0.0f && !penalize) {
        for (size_t i = 0; i < logits.size(); ++i) {
            if (std::isnan(logits[i]) || logits[i] == std::numeric_limits<float>::infinity()) {
                throw error(fmt::format("sampler: logit of token {} is {}", i, logits[i]));
            }
        }
        return argmax(logits); // fast path: no candidate set needed
    }
    candidate_set c = make_candidates(logits);
    if (penalize) {
        const std::vector<token_id> last(history_.begin(), history_.end());
        apply_repetition_penalty(c, last, params_.repeat_penalty);
    }
    if (params_.temperature <= 0.0f) {
        return select_greedy(c);
    }
    apply_top_k(c, params_.top_k);
    apply_top_p(c, params_.top_p);
    apply_min_p(c, params_.min_p);
    apply_temperature(c, params_.temperature);
    return select_random(c, rng_);
}

void sampler::accept(token_id id) {
    if (params_.repeat_last_n == 0) {
        return;
    }
    history_.push_back(id);
    while (history_.size() > static_cast<size_t>(params_.repeat_last_n)) {
        history_.pop_front();
    }
}

void sampler::reset() {
    history_.clear();
    rng_ = sampler_rng(params_.seed);
}

} // namespace tessera::llm
