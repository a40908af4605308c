// Sampling parameters (validation, JSON) and the sampler (greedy, logprobs, filters, determinism).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "server/sampling_json.h"

namespace splash {
namespace {

using json = nlohmann::json;

// Runs fn, expecting a splash::Error whose message contains `needle`.
void expect_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message: " << e.what() << "\nexpected to mention: " << needle;
  }
}

void expect_invalid(const std::function<void(SamplingParams&)>& edit, const std::string& field) {
  SamplingParams p;
  edit(p);
  expect_error([&] { validate(p); }, field);
}

TEST(SamplingParamsValidate, DefaultsAndEdgesAreValid) {
  SamplingParams p;
  EXPECT_NO_THROW(validate(p));
  p.temperature = 0.0f;
  p.top_p = 1.0f;
  p.top_k = 0;
  p.min_p = 1.0f;
  p.max_tokens = 1;
  p.logprobs = 20;
  p.stop = {"x"};
  p.stop_token_ids = {0};
  EXPECT_NO_THROW(validate(p));
}

TEST(SamplingParamsValidate, RejectsEachBadField) {
  expect_invalid([](SamplingParams& p) { p.temperature = -0.5f; }, "temperature");
  expect_invalid([](SamplingParams& p) { p.temperature = NAN; }, "temperature");
  expect_invalid([](SamplingParams& p) { p.temperature = INFINITY; }, "temperature");
  expect_invalid([](SamplingParams& p) { p.top_p = 0.0f; }, "top_p");
  expect_invalid([](SamplingParams& p) { p.top_p = 1.5f; }, "top_p");
  expect_invalid([](SamplingParams& p) { p.top_p = NAN; }, "top_p");
  expect_invalid([](SamplingParams& p) { p.top_k = -2; }, "top_k");
  expect_invalid([](SamplingParams& p) { p.min_p = -0.1f; }, "min_p");
  expect_invalid([](SamplingParams& p) { p.min_p = 1.1f; }, "min_p");
  expect_invalid([](SamplingParams& p) { p.min_p = NAN; }, "min_p");
  expect_invalid([](SamplingParams& p) { p.max_tokens = 0; }, "max_tokens");
  expect_invalid([](SamplingParams& p) { p.min_tokens = -1; }, "min_tokens");
  expect_invalid([](SamplingParams& p) { p.logprobs = 21; }, "logprobs");
  expect_invalid([](SamplingParams& p) { p.logprobs = -2; }, "logprobs");
  expect_invalid([](SamplingParams& p) { p.stop = {"ok", ""}; }, "stop");
  expect_invalid([](SamplingParams& p) { p.stop_token_ids = {1, -1}; }, "stop_token_ids");
  expect_invalid([](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty");
  expect_invalid([](SamplingParams& p) { p.presence_penalty = NAN; }, "presence_penalty");
  expect_invalid([](SamplingParams& p) { p.frequency_penalty = -2.01f; }, "frequency_penalty");
  expect_invalid([](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty");
  expect_invalid([](SamplingParams& p) { p.repetition_penalty = INFINITY; }, "repetition_penalty");
  expect_invalid([](SamplingParams& p) { p.logit_bias = {{3, 100.5f}}; }, "logit_bias");
  expect_invalid([](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }, "logit_bias");
  expect_invalid([](SamplingParams& p) { p.logit_bias = {{4, 1.0f}, {4, 2.0f}}; }, "logit_bias");
}

TEST(SamplingParamsJson, ParsesAllFields) {
  const json j = json::parse(R"({"temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
      "seed": 18446744073709551615, "max_tokens": 128, "stop": ["\n\n", "END"],
      "stop_token_ids": [1, 2], "ignore_eos": true, "logprobs": 5, "min_tokens": 3,
      "include_stop_str_in_output": true, "skip_special_tokens": false})");
  const SamplingParams p = sampling_params_from_json(j);
  EXPECT_FLOAT_EQ(p.temperature, 0.7f);
  EXPECT_FLOAT_EQ(p.top_p, 0.9f);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_FLOAT_EQ(p.min_p, 0.05f);
  ASSERT_TRUE(p.seed.has_value());
  EXPECT_EQ(*p.seed, UINT64_MAX);
  EXPECT_EQ(p.max_tokens, 128);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(p.logprobs, 5);
  EXPECT_EQ(p.min_tokens, 3);
  EXPECT_TRUE(p.include_stop_str_in_output);
  EXPECT_FALSE(p.skip_special_tokens);
}

TEST(SamplingParamsJson, PenaltiesAndLogitBias) {
  const SamplingParams p = sampling_params_from_json(json::parse(R"({"presence_penalty": 0.5,
      "frequency_penalty": -1, "repetition_penalty": 1.3, "logit_bias": {"17": -100, "3": 2.5}})"));
  EXPECT_FLOAT_EQ(p.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(p.frequency_penalty, -1.0f);
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.3f);
  EXPECT_EQ(p.logit_bias, (std::vector<std::pair<int32_t, float>>{{17, -100.0f}, {3, 2.5f}}));
  EXPECT_TRUE(p.adjusts_logits());
  EXPECT_FALSE(sampling_params_from_json(json::parse(R"({"repetition_penalty": 1, "logit_bias": {}})")).adjusts_logits());
  for (const char* bad : {R"({"logit_bias": {"x": 1}})", R"({"logit_bias": {"-3": 1}})", R"({"logit_bias": {"3": "a"}})",
                          R"({"logit_bias": {"7": 1, "07": 2}})", R"({"logit_bias": [1]})", R"({"logit_bias": {"3": 101}})",
                          R"({"logit_bias": {"99999999999": 1}})", R"({"logit_bias": {"": 1}})"})
    expect_error([&] { sampling_params_from_json(json::parse(bad)); }, "logit_bias");
}

TEST(SamplingParamsJson, EmptyObjectGivesDefaults) {
  const SamplingParams p = sampling_params_from_json(json::object());
  EXPECT_EQ(p.temperature, 1.0f);
  EXPECT_EQ(p.max_tokens, 16);
  EXPECT_FALSE(p.seed.has_value());
  EXPECT_TRUE(p.stop.empty());
  EXPECT_EQ(p.logprobs, -1);
}

TEST(SamplingParamsJson, IntegerTemperatureStopStringNullAndNegativeSeed) {
  const SamplingParams p =
      sampling_params_from_json(json::parse(R"({"temperature": 0, "stop": "###",
          "top_p": null, "seed": -1})"));
  EXPECT_EQ(p.temperature, 0.0f);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"###"}));
  EXPECT_EQ(p.top_p, 1.0f);
  EXPECT_EQ(*p.seed, UINT64_MAX);
}

TEST(SamplingParamsJson, UnknownKeyIsNamedUnlessAllowed) {
  const json j = json::parse(R"({"prompt": "hi", "temperature": 0.5})");
  expect_error([&] { sampling_params_from_json(j); }, "\"prompt\"");
  const std::string_view extra[] = {"id", "prompt"};
  EXPECT_FLOAT_EQ(sampling_params_from_json(j, extra).temperature, 0.5f);
}

TEST(SamplingParamsJson, WrongTypeNamesField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"temperature": "hot"})", "temperature"},
      {R"({"top_p": [0.5]})", "top_p"},
      {R"({"top_k": 4.5})", "top_k"},
      {R"({"min_p": true})", "min_p"},
      {R"({"seed": 1.5})", "seed"},
      {R"({"max_tokens": "16"})", "max_tokens"},
      {R"({"stop": 3})", "stop"},
      {R"({"stop": ["a", 3]})", "stop"},
      {R"({"stop_token_ids": 3})", "stop_token_ids"},
      {R"({"stop_token_ids": ["a"]})", "stop_token_ids"},
      {R"({"ignore_eos": 1})", "ignore_eos"},
      {R"({"logprobs": true})", "logprobs"},
      {R"({"max_tokens": 99999999999})", "max_tokens"},
  };
  for (const auto& [text, field] : cases)
    expect_error([&] { sampling_params_from_json(json::parse(text)); }, field);
}

TEST(SamplingParamsJson, ValidatesValuesAndShape) {
  expect_error([] { sampling_params_from_json(json::parse(R"({"top_k": -5})")); }, "top_k");
  expect_error([] { sampling_params_from_json(json::parse(R"({"stop": [""]})")); }, "stop");
  expect_error([] { sampling_params_from_json(json::parse("[1, 2]")); }, "object");
}

// ---- sampler ----

SamplingParams params(float temperature, int top_k = -1, float top_p = 1.0f, float min_p = 0.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

std::vector<double> log_softmax(const std::vector<float>& logits) {
  double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(x - max);
  std::vector<double> out;
  for (float x : logits) out.push_back(x - max - std::log(sum));
  return out;
}

// The distribution the sampler should draw from, by the spec, in double precision with a full
// sort: tokens ranked by (logit desc, id asc).
std::map<int32_t, double> reference_dist(const std::vector<float>& logits,
                                         const SamplingParams& p) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < order.size()) order.resize(p.top_k);
  const double max = logits[order[0]];
  std::vector<double> w;
  double total = 0;
  for (int32_t t : order) total += w.emplace_back(std::exp((logits[t] - max) / p.temperature));
  if (p.top_p < 1.0f) {
    double cum = 0, before = 0;
    size_t n = 0;
    while (n < order.size()) {
      before = cum;
      cum += w[n++] / total;
      if (cum >= p.top_p) break;
    }
    // Keep the test away from float rounding at the cut.
    EXPECT_GT(std::min(cum - p.top_p, p.top_p - before), 1e-5) << "top-p cut too close to call";
    order.resize(n);
  }
  std::map<int32_t, double> dist;
  double kept = 0;
  for (size_t i = 0; i < order.size(); ++i)
    if (w[i] >= p.min_p) kept += dist[order[i]] = w[i];
  for (auto& [t, q] : dist) q /= kept;
  return dist;
}

// Draws `n` tokens at steps 0..n-1 and checks that none falls outside the allowed set and that
// the counts fit the expected distribution (chi-square, about a 1e-4 false-alarm level; tokens
// expected fewer than 5 times share a bin).
void check_draws(const std::vector<float>& logits, const SamplingParams& p, int n = 2000,
                 uint64_t seed = 1234) {
  const std::map<int32_t, double> dist = reference_dist(logits, p);
  std::map<int32_t, int> counts;
  for (int step = 0; step < n; ++step) {
    const int32_t t = sample_token(logits, p, seed, step).token;
    ASSERT_TRUE(dist.count(t)) << "drew token " << t << " outside the allowed set";
    ++counts[t];
  }
  std::vector<std::pair<double, int>> bins;  // (expected, observed)
  std::pair<double, int> rare{0.0, 0};
  for (const auto& [t, q] : dist) {
    const std::pair<double, int> bin{q * n, counts[t]};
    if (bin.first >= 5.0) {
      bins.push_back(bin);
    } else {
      rare.first += bin.first;
      rare.second += bin.second;
    }
  }
  if (rare.first >= 5.0 || bins.empty()) {
    bins.push_back(rare);
  } else if (rare.first > 0) {  // too small alone: fold into the smallest bin
    auto& smallest = *std::min_element(bins.begin(), bins.end());
    smallest.first += rare.first;
    smallest.second += rare.second;
  }
  double chi2 = 0;
  for (const auto& [expected, observed] : bins) chi2 += std::pow(observed - expected, 2) / expected;
  const double df = std::max<double>(1, bins.size() - 1);
  EXPECT_LT(chi2, df + 6 * std::sqrt(2 * df) + 5) << "over " << bins.size() << " bins";
}

const std::vector<float> kLogits = {1.0f, 2.5f, 0.2f,  -1.0f, 3.0f, 2.0f, -0.5f, 1.5f,
                                    0.7f, -2.0f, 2.2f, 0.0f, 1.1f, -3.0f, 2.8f, 0.4f};

TEST(SamplerGreedy, ArgmaxWithTiesToLowestId) {
  const SamplingParams p = params(0.0f);
  EXPECT_EQ(sample_token(kLogits, p, 0, 0).token, 4);
  const std::vector<float> tied = {0.0f, 5.0f, -1.0f, 5.0f, 5.0f};
  for (uint64_t step = 0; step < 20; ++step) EXPECT_EQ(sample_token(tied, p, step, step).token, 1);
  // -inf (masked) logits are fine as long as one is finite.
  const float ninf = -INFINITY;
  EXPECT_EQ(sample_token(std::vector<float>{ninf, ninf, -7.0f}, p, 0, 0).token, 2);
}

// min_tokens: EOS and stop_token_ids cannot be picked, whatever their logits.
TEST(SamplerGreedy, SuppressedStopTokensAreNeverPicked) {
  SamplingParams p = params(0.0f);
  p.stop_token_ids = {3};
  const std::vector<float> logits = {0.0f, 9.0f, 1.0f, 8.0f, 2.0f};
  const auto suppressed = [&](std::optional<int32_t> eos) {
    std::vector<float> row = logits;
    suppress_stop_tokens(row, p, eos);
    return row;
  };
  const std::vector<float> masked = suppressed(1);
  EXPECT_EQ(sample_token(masked, p, 0, 0).token, 4);
  p.temperature = 1.0f;
  for (uint64_t step = 0; step < 50; ++step) {
    const int32_t t = sample_token(masked, p, 7, step).token;
    EXPECT_NE(t, 1);
    EXPECT_NE(t, 3);
  }
  p.ignore_eos = true;  // EOS is then an ordinary token
  EXPECT_EQ(suppressed(1)[1], 9.0f);
  p.stop_token_ids = {3, 99};
  std::vector<float> want = logits;
  want[3] = -INFINITY;
  EXPECT_EQ(suppressed(99), want);  // ids outside the row are ignored
}

TEST(SamplerGreedy, TinyTemperatureActsLikeArgmax) {
  for (const SamplingParams& p : {params(1e-30f), params(1e-30f, -1, 0.9f), params(1e-30f, 3)})
    for (uint64_t step = 0; step < 20; ++step)
      EXPECT_EQ(sample_token(kLogits, p, 3, step).token, 4);
}

TEST(SamplerGreedy, RejectsBrokenLogits) {
  const SamplingParams p = params(1.0f);
  expect_error([&] { sample_token(std::vector<float>{}, p, 0, 0); }, "empty");
  expect_error([&] { sample_token(std::vector<float>{0.0f, NAN}, p, 0, 0); }, "NaN");
  expect_error([&] { sample_token(std::vector<float>{-INFINITY, -INFINITY}, p, 0, 0); }, "max");
}

TEST(SamplerLogprobs, MatchLogSoftmaxOfRawLogits) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> logits(5000);
  for (float& x : logits) x = normal(rng);
  const std::vector<double> ref = log_softmax(logits);
  // Temperature and filters change what is drawn, never the reported (raw) logprobs.
  for (const SamplingParams& base : {params(0.0f), params(0.3f, 50, 0.9f, 0.1f), params(2.0f)}) {
    SamplingParams p = base;
    p.logprobs = 20;
    for (uint64_t step = 0; step < 5; ++step) {
      const SampleResult r = sample_token(logits, p, 99, step);
      EXPECT_NEAR(r.logprob, ref[r.token], 1e-5);
      ASSERT_EQ(r.top.size(), 20u);
      std::vector<int32_t> order(logits.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return ref[a] > ref[b]; });
      for (size_t i = 0; i < r.top.size(); ++i) {
        EXPECT_EQ(r.top[i].token, order[i]) << "rank " << i;
        EXPECT_NEAR(r.top[i].logprob, ref[order[i]], 1e-5);
      }
    }
  }
}

TEST(SamplerLogprobs, TopNOrderAndTiesAndLevels) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  SamplingParams p = params(0.0f);
  p.logprobs = 3;
  const SampleResult r = sample_token(logits, p, 0, 0);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].token, 1);
  EXPECT_EQ(r.top[1].token, 3);
  EXPECT_EQ(r.top[2].token, 2);
  EXPECT_GE(r.top[0].logprob, r.top[1].logprob);
  EXPECT_GT(r.top[1].logprob, r.top[2].logprob);
  // n above the vocab size gives the whole vocab.
  p.logprobs = 20;
  EXPECT_EQ(sample_token(logits, p, 0, 0).top.size(), logits.size());
  p.logprobs = 0;
  const SampleResult only = sample_token(logits, p, 0, 0);
  EXPECT_TRUE(only.top.empty());
  EXPECT_NEAR(only.logprob, log_softmax(logits)[1], 1e-5);
  p.logprobs = -1;
  EXPECT_TRUE(std::isnan(sample_token(logits, p, 0, 0).logprob));
}

TEST(SamplerDistribution, Temperature) {
  check_draws(kLogits, params(1.0f));
  check_draws(kLogits, params(0.5f));
  check_draws(kLogits, params(1.7f), 3000);
}

TEST(SamplerDistribution, TopK) {
  check_draws(kLogits, params(1.0f, 1));
  check_draws(kLogits, params(1.0f, 3));
  check_draws(kLogits, params(0.8f, 6));
  check_draws(kLogits, params(1.0f, 16));  // k = V: no filtering
}

TEST(SamplerDistribution, TopP) {
  check_draws(kLogits, params(1.0f, -1, 0.5f));
  check_draws(kLogits, params(1.0f, -1, 0.8f));
  check_draws(kLogits, params(0.7f, -1, 0.9f));
  check_draws(kLogits, params(1.0f, -1, 0.01f));  // only the best token
}

TEST(SamplerDistribution, MinP) {
  check_draws(kLogits, params(1.0f, -1, 1.0f, 0.1f));
  check_draws(kLogits, params(1.0f, -1, 1.0f, 0.4f));
  check_draws(kLogits, params(1.5f, -1, 1.0f, 0.3f));
}

TEST(SamplerDistribution, CombinedFiltersInOrder) {
  // top-p is computed on the probs renormalised after top-k, min-p after both.
  check_draws(kLogits, params(1.0f, 5, 0.8f));
  check_draws(kLogits, params(0.9f, 8, 0.95f, 0.15f));
  check_draws(kLogits, params(1.2f, 10, 1.0f, 0.2f));
}

TEST(SamplerDistribution, TiedLogitsAtTheCutKeepLowerIds) {
  // Tokens 1, 3, 5 and 7 tie; top-k 2 keeps 1 and 3.
  const std::vector<float> logits = {0.0f, 2.0f, 0.0f, 2.0f, 0.0f, 2.0f, 0.0f, 2.0f};
  check_draws(logits, params(1.0f, 2));
  check_draws(logits, params(1.0f, -1, 0.4f));
}

TEST(SamplerDistribution, TopPCutAmongManyCandidates) {
  // A head of 10 tokens over a flat tail of ~10K: every token is a top-p candidate, so the cut is
  // found by bisecting, inside the head or among the tail's ties (which go by token id).
  std::vector<float> logits(10000, 0.0f);
  for (int i = 0; i < 10; ++i) logits[999 * i + 17] = 6.0f + 0.1f * i;
  check_draws(logits, params(1.0f, -1, 0.15f));
  check_draws(logits, params(1.0f, -1, 0.5f));
  check_draws(logits, params(1.0f, 3000, 0.8f));
}

TEST(SamplerDistribution, LargeVocabTopPAndTopK) {
  // 130K vocab: top-p without top-k keeps a head of ~2700 tied tokens, and the tie order at the
  // cut must follow token ids.
  const size_t vocab = 131072;
  std::vector<float> logits(vocab, 0.0f);
  std::vector<int32_t> high;
  std::mt19937 rng(3);
  for (size_t t = 0; t < vocab; ++t)
    if (rng() % 43 == 0) high.push_back(static_cast<int32_t>(t));
  for (int32_t t : high) logits[t] = 5.0f;
  const SamplingParams p = params(1.0f, -1, 0.7f);
  const std::map<int32_t, double> dist = reference_dist(logits, p);
  ASSERT_GT(dist.size(), 2048u);
  ASSERT_LT(dist.size(), high.size());
  for (int step = 0; step < 300; ++step) {
    const int32_t t = sample_token(logits, p, 5, step).token;
    ASSERT_TRUE(dist.count(t)) << "drew token " << t << " outside the top-p set";
  }
  // Same head with top-k on the large vocab, the top-k path's partial sort.
  const SamplingParams k = params(1.0f, 100);
  for (int step = 0; step < 300; ++step) {
    const int32_t t = sample_token(logits, k, 5, step).token;
    ASSERT_TRUE(std::find(high.begin(), high.begin() + 100, t) != high.begin() + 100) << t;
  }
}

TEST(SamplerDeterminism, SameSeedAndStepGiveSameTokenInAnyOrder) {
  const SamplingParams p = params(1.0f);
  const std::vector<float> flat(1000, 0.0f);
  std::vector<int32_t> forward;
  for (uint64_t step = 0; step < 200; ++step)
    forward.push_back(sample_token(flat, p, 42, step).token);
  // Interleave other requests and go backwards: nothing changes.
  for (uint64_t step = 200; step-- > 0;) {
    sample_token(flat, p, 7, step);
    sample_token(kLogits, params(0.5f, 3), 8, step + 1);
    EXPECT_EQ(sample_token(flat, p, 42, step).token, forward[step]) << "step " << step;
  }
}

TEST(SamplerDeterminism, DifferentStepsAndSeedsDiffer) {
  const SamplingParams p = params(1.0f);
  const std::vector<float> flat(1000, 0.0f);
  std::set<int32_t> over_steps;
  int same_as_other_seed = 0;
  for (uint64_t step = 0; step < 100; ++step) {
    const int32_t t = sample_token(flat, p, 42, step).token;
    over_steps.insert(t);
    same_as_other_seed += t == sample_token(flat, p, 43, step).token;
  }
  EXPECT_GT(over_steps.size(), 90u);  // ~95 distinct expected from 100 uniform draws over 1000
  EXPECT_LT(same_as_other_seed, 5);   // ~0.1 expected
}

}  // namespace
}  // namespace splash
