// Sampler stages and chain: exact values on small vectors, a naive double
// precision reference of the whole chain, and seeded draw statistics.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "tessera/core/error.hpp"
#include "tessera/llm/sampler.hpp"

using namespace tessera::llm;
using ids = std::vector<token_id>;

namespace {

ids ids_of(const candidate_set & c) {
    ids out;
    for (const auto & t : c.items) {
        out.push_back(t.id);
    }
    return out;
}

std::vector<float> log_probs(const std::vector<double> & p) {
    std::vector<float> out;
    for (const double x : p) {
        out.push_back(static_cast<float>(std::log(x)));
    }
    return out;
}

// Pearson's chi-square statistic of observed counts against probabilities.
double chi_square(const std::map<token_id, int> & counts, const std::map<token_id, double> & p, int n) {
    double chi = 0.0;
    for (const auto & [id, prob] : p) {
        const double expected = prob * n;
        const auto it = counts.find(id);
        const double observed = it == counts.end() ? 0.0 : it->second;
        chi += (observed - expected) * (observed - expected) / expected;
    }
    return chi;
}

} // namespace

TEST(Sampler, ArgmaxLowestIndexWinsTies) {
    EXPECT_EQ(argmax(std::vector<float>{1, 3, 3, 2}), 1);
    EXPECT_EQ(argmax(std::vector<float>{-1, -1}), 0);
    const float ninf = -std::numeric_limits<float>::infinity();
    EXPECT_EQ(argmax(std::vector<float>{ninf, ninf, -100}), 2);
    EXPECT_THROW(argmax(std::vector<float>{}), tessera::error);
    candidate_set c = make_candidates(std::vector<float>{0, 7, 2, 7});
    EXPECT_EQ(select_greedy(c), 1);
    sort_candidates(c);
    EXPECT_EQ(ids_of(c), (ids{1, 3, 2, 0}));
    EXPECT_EQ(select_greedy(c), 1);
}

TEST(Sampler, BadLogitsAreRejected) {
    EXPECT_THROW(make_candidates(std::vector<float>{}), tessera::error);
    try {
        make_candidates(std::vector<float>{0, 1, std::nanf(""), 2});
        FAIL() << "no error";
    } catch (const tessera::error & e) {
        EXPECT_NE(std::string(e.what()).find("token 2"), std::string::npos) << e.what();
    }
    EXPECT_THROW(make_candidates(std::vector<float>{0, std::numeric_limits<float>::infinity()}), tessera::error);
    EXPECT_NO_THROW(make_candidates(std::vector<float>{0, -std::numeric_limits<float>::infinity()}));
    sampler greedy({.temperature = 0});
    EXPECT_THROW(greedy.sample(std::vector<float>{0, std::nanf("")}), tessera::error);
}

TEST(Sampler, SoftmaxMatchesDoubleReference) {
    const std::vector<float> logits = {1.5f, -2.0f, 0.25f, 3.0f, 3.0f};
    candidate_set c = make_candidates(logits);
    softmax(c);
    double sum = 0;
    for (const float l : logits) {
        sum += std::exp(static_cast<double>(l));
    }
    EXPECT_EQ(ids_of(c), (ids{3, 4, 0, 2, 1}));
    for (const auto & t : c.items) {
        EXPECT_NEAR(t.p, std::exp(static_cast<double>(logits[t.id])) / sum, 1e-7) << "token " << t.id;
    }
    // All masked: uniform.
    const float ninf = -std::numeric_limits<float>::infinity();
    candidate_set m = make_candidates(std::vector<float>{ninf, ninf});
    softmax(m);
    EXPECT_FLOAT_EQ(m.items[0].p, 0.5f);
}

TEST(Sampler, TopKKeepsExactlyTheKLargest) {
    const std::vector<float> logits = {0.1f, 5.0f, 3.0f, 5.0f, -1.0f, 4.0f};
    candidate_set c = make_candidates(logits);
    apply_top_k(c, 3);
    EXPECT_EQ(ids_of(c), (ids{1, 3, 5}));
    EXPECT_TRUE(c.sorted);
    // A tie at the boundary keeps the lower id.
    candidate_set t = make_candidates(std::vector<float>{1, 2, 2, 2});
    apply_top_k(t, 2);
    EXPECT_EQ(ids_of(t), (ids{1, 2}));
    // k <= 0 or k >= n keeps everything.
    candidate_set all = make_candidates(logits);
    apply_top_k(all, 0);
    EXPECT_EQ(all.size(), 6u);
    apply_top_k(all, 100);
    EXPECT_EQ(all.size(), 6u);
    apply_top_k(all, 1);
    EXPECT_EQ(ids_of(all), (ids{1}));
}

TEST(Sampler, TopPKeepsSmallestSetReachingP) {
    // probabilities 0.5, 0.3, 0.15, 0.05 on ids 2, 0, 3, 1
    const std::vector<float> logits = log_probs({0.3, 0.05, 0.5, 0.15});
    const auto kept = [&](float p, size_t min_keep) {
        candidate_set c = make_candidates(logits);
        apply_top_p(c, p, min_keep);
        return ids_of(c);
    };
    EXPECT_EQ(kept(0.4f, 1), (ids{2}));
    EXPECT_EQ(kept(0.75f, 1), (ids{2, 0}));
    EXPECT_EQ(kept(0.81f, 1), (ids{2, 0, 3}));
    EXPECT_EQ(kept(0.99f, 1), (ids{2, 0, 3, 1}));
    EXPECT_EQ(kept(1.0f, 1).size(), 4u); // off
    EXPECT_EQ(kept(0.0f, 1), (ids{2}));
    EXPECT_EQ(kept(0.4f, 3), (ids{2, 0, 3}));
}

TEST(Sampler, MinPThresholdIsRelativeToTheLargestProbability) {
    const std::vector<float> logits = log_probs({0.3, 0.05, 0.5, 0.15});
    const auto kept = [&](float p, size_t min_keep) {
        candidate_set c = make_candidates(logits);
        apply_min_p(c, p, min_keep);
        return ids_of(c);
    };
    EXPECT_EQ(kept(0.25f, 1), (ids{2, 0, 3}));   // threshold 0.125
    EXPECT_EQ(kept(0.5f, 1), (ids{2, 0}));       // threshold 0.25
    EXPECT_EQ(kept(0.9f, 1), (ids{2}));          // threshold 0.45
    EXPECT_EQ(kept(0.9f, 2), (ids{2, 0}));       // min_keep
    EXPECT_EQ(kept(0.05f, 1).size(), 4u);        // threshold 0.025
    EXPECT_EQ(kept(0.0f, 1).size(), 4u);         // off
}

TEST(Sampler, RepetitionPenaltyDividesPositiveMultipliesNegative) {
    candidate_set c = make_candidates(std::vector<float>{2.0f, -2.0f, 0.0f, 4.0f, 1.0f});
    // Token 0 appears twice but is penalized once; 9 is not in the set.
    apply_repetition_penalty(c, ids{0, 1, 0, 2, 9}, 2.0f);
    const std::vector<float> expected = {1.0f, -4.0f, 0.0f, 4.0f, 1.0f};
    for (const auto & t : c.items) {
        EXPECT_EQ(t.logit, expected[t.id]) << "token " << t.id;
    }
    // A penalty below 1 rewards instead.
    candidate_set r = make_candidates(std::vector<float>{2.0f, -2.0f});
    apply_repetition_penalty(r, ids{0, 1}, 0.5f);
    EXPECT_EQ(r.items[0].logit, 4.0f);
    EXPECT_EQ(r.items[1].logit, -1.0f);
    EXPECT_THROW(apply_repetition_penalty(r, ids{0}, 0.0f), tessera::error);
}

TEST(Sampler, TemperatureScalesLogits) {
    candidate_set c = make_candidates(std::vector<float>{1.0f, -3.0f});
    apply_temperature(c, 0.5f);
    EXPECT_EQ(c.items[0].logit, 2.0f);
    EXPECT_EQ(c.items[1].logit, -6.0f);
    EXPECT_THROW(apply_temperature(c, 0.0f), tessera::error);
}

// A temperature so small that a logit over it overflows (10 / 1e-38 >
// FLT_MAX): the logits are taken relative to the largest, which stays the
// only one near 0, so every draw picks it (before: several +inf, the
// soft-max NaN, and the first +inf token picked). Where the largest does
// not overflow (3 / 1e-38 = 3e38), the plain division as before.
TEST(Sampler, TinyTemperatureIsGreedyNotNaN) {
    candidate_set c = make_candidates(std::vector<float>{1.0f, 10.0f, 9.0f});
    apply_temperature(c, 1e-38f);
    EXPECT_EQ(c.items[0].logit, -std::numeric_limits<float>::infinity());
    EXPECT_EQ(c.items[1].logit, 0.0f);
    EXPECT_EQ(c.items[2].logit, -1.0f / 1e-38f);
    candidate_set n = make_candidates(std::vector<float>{1.0f, 3.0f});
    apply_temperature(n, 1e-38f);
    EXPECT_EQ(n.items[1].logit, 3.0f / 1e-38f);
    for (uint64_t seed : {1u, 2u, 3u, 4u}) {
        sampler s({.temperature = 1e-38f, .seed = seed});
        EXPECT_EQ(s.sample(std::vector<float>{1.0f, 10.0f, 9.0f, 10.0f - 1e-6f}), 1) << "seed " << seed;
    }
}

TEST(Sampler, RandomDrawUsesDocumentedFormula) {
    // mt19937 with the standard's default seed 5489 first yields 3499211612
    // (C++ standard [rand.predef]: the 10000th value is 4123659995), so
    // u = 3499211612 / 2^32 = 0.81472. Sorted probabilities 0.4, 0.3, 0.2,
    // 0.1 (ids 3, 2, 1, 0) have cumulative sums 0.4, 0.7, 0.9: u picks id 1.
    std::mt19937 rng(5489u);
    candidate_set c = make_candidates(log_probs({0.1, 0.2, 0.3, 0.4}));
    EXPECT_EQ(select_random(c, rng), 1);
    std::mt19937 check(5489u);
    check.discard(9999);
    EXPECT_EQ(check(), 4123659995u);
}

TEST(Sampler, TemperatureZeroIsGreedy) {
    sampler s({.temperature = 0.0f});
    const std::vector<float> logits = {0.5f, 2.0f, 2.0f, -1.0f};
    for (int i = 0; i < 5; ++i) {
        EXPECT_EQ(s.sample(logits), 1);
    }
    // With a penalty on token 1 (2.0 / 1.5 = 1.33 < 2.0), token 2 wins.
    sampler p({.temperature = 0.0f, .repeat_penalty = 1.5f, .repeat_last_n = 4});
    p.accept(1);
    EXPECT_EQ(p.sample(logits), 2);
    // Token 1 drops out of the 4-token history again.
    for (int i = 0; i < 4; ++i) {
        p.accept(3);
    }
    EXPECT_EQ(p.history(), (ids{3, 3, 3, 3}));
    EXPECT_EQ(p.sample(logits), 1);
}

TEST(Sampler, SameSeedSameSequence) {
    std::mt19937 gen(7);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::vector<float> logits(1000);
    for (auto & l : logits) {
        l = nd(gen);
    }
    const sampler_params params{.temperature = 1.0f, .top_k = 50, .top_p = 0.9f, .min_p = 0.01f, .seed = 1234};
    const auto run = [&](sampler_params p) {
        sampler s(p);
        ids out;
        for (int i = 0; i < 64; ++i) {
            out.push_back(s.sample(logits));
            s.accept(out.back());
        }
        return out;
    };
    const ids a = run(params);
    EXPECT_EQ(run(params), a);
    EXPECT_GT(std::set<token_id>(a.begin(), a.end()).size(), 5u); // really random, not constant
    sampler_params other = params;
    other.seed = 4321;
    EXPECT_NE(run(other), a);
    // reset() restarts the same sequence.
    sampler s(params);
    const token_id first = s.sample(logits);
    s.sample(logits);
    s.reset();
    EXPECT_EQ(s.sample(logits), first);
    EXPECT_TRUE(s.history().empty());
}

// A seed below 2^32 seeds mt19937 directly (the sequences of the 32-bit
// seeds before), a larger one through seed_seq{low half, high half}.
TEST(Sampler, SixtyFourBitSeeds) {
    const auto first = [](std::mt19937 g) {
        std::vector<uint32_t> v(4);
        for (auto & x : v) x = g();
        return v;
    };
    EXPECT_EQ(first(sampler_rng(0)), first(std::mt19937(0u)));
    EXPECT_EQ(first(sampler_rng(42)), first(std::mt19937(42u)));
    EXPECT_EQ(first(sampler_rng(0xffffffffull)), first(std::mt19937(0xffffffffu)));
    const uint64_t big = (uint64_t(1) << 32) + 42;
    std::seed_seq seq{42u, 1u};
    EXPECT_EQ(first(sampler_rng(big)), first(std::mt19937(seq)));
    EXPECT_NE(first(sampler_rng(big)), first(sampler_rng(42)));
    EXPECT_NE(first(sampler_rng(~uint64_t(0))), first(sampler_rng(0xffffffffull)));
    // The sampler draws from that generator, also after reset().
    const std::vector<float> logits = {0.0f, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f};
    const sampler_params p{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = big};
    sampler s(p);
    std::mt19937 g = sampler_rng(big);
    candidate_set c = make_candidates(logits);
    const token_id want = select_random(c, g);
    EXPECT_EQ(s.sample(logits), want);
    s.reset();
    EXPECT_EQ(s.sample(logits), want);
}

TEST(Sampler, DrawsFollowTheProbabilities) {
    const std::vector<double> p = {0.1, 0.2, 0.3, 0.4};
    sampler s({.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 42});
    const std::vector<float> logits = log_probs(p);
    const int n = 20000;
    std::map<token_id, int> counts;
    for (int i = 0; i < n; ++i) {
        ++counts[s.sample(logits)];
    }
    std::map<token_id, double> expected;
    for (size_t i = 0; i < p.size(); ++i) {
        expected[static_cast<token_id>(i)] = p[i];
    }
    // 3 degrees of freedom: P(chi2 > 16.27) = 0.001. Deterministic (fixed seed).
    EXPECT_LT(chi_square(counts, expected, n), 16.27);
}

TEST(Sampler, ChainMatchesNaiveReference) {
    // 60 random logits; chain top-k 20 -> top-p 0.8 -> min-p 0.1 -> T 0.7,
    // recomputed here in double precision from the definitions.
    std::mt19937 gen(99);
    std::normal_distribution<double> nd(0.0, 1.5);
    std::vector<float> logits(60);
    for (auto & l : logits) {
        l = static_cast<float>(nd(gen));
    }
    const sampler_params params{.temperature = 0.7f, .top_k = 20, .top_p = 0.8f, .min_p = 0.1f, .seed = 3};

    std::vector<int> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    order.resize(20);
    const auto probs = [&](const std::vector<int> & set, double t) {
        double sum = 0;
        std::vector<double> q;
        for (const int i : set) {
            q.push_back(std::exp(logits[i] / t));
            sum += q.back();
        }
        for (auto & x : q) {
            x /= sum;
        }
        return q;
    };
    std::vector<double> q = probs(order, 1.0);
    double cum = 0;
    size_t keep = 0;
    while (keep < q.size()) {
        cum += q[keep++];
        if (cum >= 0.8) {
            break;
        }
    }
    order.resize(keep);
    q = probs(order, 1.0);
    std::vector<int> kept;
    for (size_t i = 0; i < order.size(); ++i) {
        if (q[i] >= 0.1 * q[0]) {
            kept.push_back(order[i]);
        }
    }
    const std::vector<double> final_p = probs(kept, 0.7);
    ASSERT_GE(kept.size(), 3u); // the case is not degenerate

    std::map<token_id, double> expected;
    for (size_t i = 0; i < kept.size(); ++i) {
        expected[kept[i]] = final_p[i];
    }
    sampler s(params);
    const int n = 20000;
    std::map<token_id, int> counts;
    for (int i = 0; i < n; ++i) {
        const token_id t = s.sample(logits);
        ASSERT_TRUE(expected.count(t)) << "token " << t << " should have been filtered out";
        ++counts[t];
    }
    // df = kept - 1; 30 is above the 0.001 critical value for df up to 10.
    ASSERT_LE(kept.size(), 11u);
    EXPECT_LT(chi_square(counts, expected, n), 30.0);
}

TEST(Sampler, ParameterValidationNamesTheParameter) {
    const auto msg = [](sampler_params p) {
        try {
            sampler s(p);
        } catch (const tessera::error & e) {
            return std::string(e.what());
        }
        return std::string("(no error)");
    };
    EXPECT_NE(msg({.temperature = std::nanf("")}).find("temperature"), std::string::npos);
    EXPECT_NE(msg({.top_p = 1.5f}).find("top_p"), std::string::npos);
    EXPECT_NE(msg({.top_p = -0.1f}).find("top_p"), std::string::npos);
    EXPECT_NE(msg({.min_p = 2.0f}).find("min_p"), std::string::npos);
    EXPECT_NE(msg({.repeat_penalty = 0.0f}).find("repeat_penalty"), std::string::npos);
    EXPECT_NE(msg({.repeat_penalty = -1.0f}).find("repeat_penalty"), std::string::npos);
    EXPECT_NE(msg({.repeat_last_n = -1}).find("repeat_last_n"), std::string::npos);
    EXPECT_EQ(msg({}), "(no error)");
    EXPECT_EQ(msg({.temperature = -1.0f}), "(no error)"); // negative = greedy
}
