#include "engine/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>

#include "core/error.h"

namespace splash {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// ---- randomness ----

// SplitMix64's output function: a bijective 64-bit mixer.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The step-th output of a SplitMix64 stream keyed by the seed, as a double in [0, 1).
double uniform01(uint64_t seed, uint64_t step) {
  const uint64_t h = mix64(mix64(seed) + (step + 1) * 0x9e3779b97f4a7c15ULL);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

// ---- ranking ----

// A token as one integer that orders like (logit desc, id asc) under >, so ranking compares plain
// integers and equal logits go to the lower id.
uint64_t rank_key(float logit, size_t token) {
  const uint32_t bits = std::bit_cast<uint32_t>(logit + 0.0f);  // + 0.0f turns -0 into +0
  const uint32_t ordered = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
  return (static_cast<uint64_t>(ordered) << 32) | (0xffffffffu - static_cast<uint32_t>(token));
}
int32_t key_token(uint64_t key) { return static_cast<int32_t>(0xffffffffu - (key & 0xffffffffu)); }

// The max logit's lowest token id. A NaN is refused rather than ranked somewhere arbitrary, and
// the weights need a finite maximum. Eight independent lanes let GCC vectorize the scan at -O2.
int32_t checked_argmax(std::span<const float> logits) {
  constexpr size_t kLanes = 8;
  if (logits.empty()) fail("sample_token: empty logits");
  float lane_max[kLanes];
  uint32_t lane_nan[kLanes] = {};
  std::fill(lane_max, lane_max + kLanes, kNegInf);
  const size_t n = logits.size();
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) {
      const float x = logits[i + j];
      lane_max[j] = x > lane_max[j] ? x : lane_max[j];
      lane_nan[j] |= static_cast<uint32_t>(x != x);
    }
  float max = *std::max_element(lane_max, lane_max + kLanes);
  bool nan = std::any_of(lane_nan, lane_nan + kLanes, [](uint32_t v) { return v != 0; });
  for (; i < n; ++i) {
    max = logits[i] > max ? logits[i] : max;
    nan |= std::isnan(logits[i]);
  }
  if (nan) {
    const auto bad = std::find_if(logits.begin(), logits.end(), [](float x) { return x != x; });
    fail("sample_token: NaN logit at token {}", bad - logits.begin());
  }
  if (!std::isfinite(max)) fail("sample_token: max logit is {}", max);
  return static_cast<int32_t>(std::find(logits.begin(), logits.end(), max) - logits.begin());
}

// Keys of the n best tokens, in no particular order. One pass with a rising threshold: n is
// small next to the vocab, so most tokens are dismissed by a single float compare.
void select_best(std::span<const float> logits, size_t n, std::vector<uint64_t>& out) {
  out.clear();
  const size_t cap = 2 * n + 64;
  uint64_t min_key = 0;  // a token must beat this key to enter
  float min_logit = kNegInf;
  const auto prune = [&] {
    std::nth_element(out.begin(), out.begin() + (n - 1), out.end(), std::greater<>());
    out.resize(n);
    min_key = out[n - 1];
    min_logit = logits[key_token(min_key)];
  };
  for (size_t t = 0; t < logits.size(); ++t) {
    if (logits[t] < min_logit) continue;
    const uint64_t key = rank_key(logits[t], t);
    if (key <= min_key) continue;
    out.push_back(key);
    if (out.size() == cap) prune();
  }
  if (out.size() > n) prune();
}

// ---- drawing ----

// Index of the first weight whose running total (from `before`) exceeds target; the last
// positive weight when rounding leaves the total short. Zero weights are never picked.
size_t pick(const float* w, size_t n, double before, double target) {
  size_t last = 0;
  for (size_t i = 0; i < n; ++i) {
    if (w[i] == 0.0f) continue;
    last = i;
    before += w[i];
    if (before > target) break;
  }
  return last;
}

class Drawer {
 public:
  Drawer(std::span<const float> logits, const SamplingParams& p, float max)
      : logits_(logits), p_(p), max_(max) {}

  int32_t draw(double u) {
    if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < logits_.size()) {
      select_best(logits_, p_.top_k, keys_);
      double total = 0;
      for (uint64_t k : keys_) total += weight_of(k);
      return draw_candidates(u, total);
    }
    if (p_.top_p < 1.0f) return draw_candidates(u, top_p_candidates());
    return draw_all(u);
  }

 private:
  // Unnormalised prob of a token after temperature; the best weighs 1, so min-p compares a
  // weight with min_p directly. Division (not * 1/T) keeps a tiny T from giving 0 * inf.
  float weight(float logit) const { return std::exp((logit - max_) / p_.temperature); }
  float weight_of(uint64_t key) const { return weight(logits_[key_token(key)]); }

  // Fills keys_ with every token that can be in the top-p set; returns the vocab's total weight.
  // A token weighing w with V * w <= (1 - top_p) * total has at most that much mass from it down,
  // so the tokens above it already reach top_p; half that bound keeps rounding out of it.
  double top_p_candidates() {
    const size_t vocab = logits_.size();
    double total = 0;
    for (float x : logits_) total += weight(x);
    const double min_weight = 0.5 * (1.0 - p_.top_p) * total / static_cast<double>(vocab);
    const float min_logit = max_ + p_.temperature * static_cast<float>(std::log(min_weight));
    keys_.clear();
    for (size_t t = 0; t < vocab; ++t)
      if (logits_[t] >= min_logit) keys_.push_back(rank_key(logits_[t], t));  // >=: T -> 0
    return total;
  }

  // keys_ (the best tokens, unordered, whose mass out of `total` covers the top-p set) -> top-p
  // -> min-p -> draw.
  int32_t draw_candidates(double u, double total) {
    if (p_.top_p < 1.0f) keys_.resize(top_p_count(p_.top_p * total));
    weights_.clear();
    for (uint64_t k : keys_) {
      const float w = weight_of(k);
      weights_.push_back(w < p_.min_p ? 0.0f : w);
    }
    double kept = 0;
    for (float w : weights_) kept += w;
    return key_token(keys_[pick(weights_.data(), weights_.size(), 0.0, u * kept)]);
  }

  // Size of the smallest best-first prefix of keys_ with mass >= target, leaving that set in
  // keys_[0, size) unordered: bisects with nth_element, so no sort beyond a small final range.
  size_t top_p_count(double target) {
    constexpr size_t kSortBelow = 64;
    size_t lo = 0, hi = keys_.size();  // the set ends in (lo, hi]; keys_[0, lo) are all in it
    double before = 0;                 // mass of keys_[0, lo), < target
    while (hi - lo > kSortBelow) {
      const size_t mid = lo + (hi - lo) / 2;
      std::nth_element(keys_.begin() + lo, keys_.begin() + mid, keys_.begin() + hi,
                       std::greater<>());
      double better = 0;
      for (size_t i = lo; i < mid; ++i) better += weight_of(keys_[i]);
      if (before + better >= target) {
        hi = mid;
      } else if (before + better + weight_of(keys_[mid]) >= target) {
        return mid + 1;
      } else {
        before += better + weight_of(keys_[mid]);
        lo = mid + 1;
      }
    }
    std::sort(keys_.begin() + lo, keys_.begin() + hi, std::greater<>());
    while (lo < hi) {
      before += weight_of(keys_[lo++]);
      if (before >= target) break;
    }
    return lo;
  }

  // Only temperature and min-p: every token is a candidate. Weights go in blocks so the draw
  // skips whole blocks by their sums instead of walking the vocab one token at a time.
  int32_t draw_all(double u) {
    constexpr size_t kBlock = 256;
    const size_t vocab = logits_.size();
    weights_.resize(vocab);
    blocks_.clear();
    double total = 0;
    for (size_t b = 0; b < vocab; b += kBlock) {
      double block = 0;
      for (size_t t = b; t < std::min(b + kBlock, vocab); ++t) {
        const float w = weight(logits_[t]);
        weights_[t] = w < p_.min_p ? 0.0f : w;
        block += weights_[t];
      }
      total += blocks_.emplace_back(block);
    }
    const double target = u * total;
    // The block where the running total passes target (or the last non-empty one), and the
    // mass before it.
    size_t hit = 0;
    double before = 0, cum = 0;
    for (size_t b = 0; b < blocks_.size(); ++b) {
      if (blocks_[b] == 0.0) continue;
      hit = b;
      before = cum;
      cum += blocks_[b];
      if (cum > target) break;
    }
    const size_t start = hit * kBlock;
    const size_t len = std::min(kBlock, vocab - start);
    return static_cast<int32_t>(start + pick(weights_.data() + start, len, before, target));
  }

  std::span<const float> logits_;
  const SamplingParams& p_;
  float max_;
  // Per-thread scratch, so a 130K vocab costs no allocation per call.
  static thread_local std::vector<uint64_t> keys_;
  static thread_local std::vector<float> weights_;
  static thread_local std::vector<double> blocks_;
};

thread_local std::vector<uint64_t> Drawer::keys_;
thread_local std::vector<float> Drawer::weights_;
thread_local std::vector<double> Drawer::blocks_;

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int n, double lse) {
  thread_local std::vector<uint64_t> keys;
  select_best(logits, std::min(static_cast<size_t>(n), logits.size()), keys);
  std::sort(keys.begin(), keys.end(), std::greater<>());
  std::vector<TokenLogprob> top;
  for (uint64_t k : keys) {
    const int32_t t = key_token(k);
    top.push_back({t, static_cast<float>(logits[t] - lse)});
  }
  return top;
}

}  // namespace

SampleResult sample_token(std::span<const float> logits, const SamplingParams& p, uint64_t seed,
                          uint64_t step) {
  const int32_t best = checked_argmax(logits);
  const float max = logits[best];
  SampleResult r;
  r.token = p.temperature == 0.0f ? best : Drawer(logits, p, max).draw(uniform01(seed, step));
  r.logprob = std::numeric_limits<float>::quiet_NaN();
  if (p.logprobs >= 0) {
    double sum = 0;
    for (float x : logits) sum += std::exp(x - max);
    const double lse = max + std::log(sum);
    r.logprob = static_cast<float>(logits[r.token] - lse);
    if (p.logprobs > 0) r.top = top_logprobs(logits, p.logprobs, lse);
  }
  return r;
}

void suppress_stop_tokens(std::span<float> logits, const SamplingParams& p, std::optional<int32_t> eos) {
  auto ban = [&](int32_t id) {
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) logits[id] = -std::numeric_limits<float>::infinity();
  };
  if (eos && !p.ignore_eos) ban(*eos);
  for (int32_t id : p.stop_token_ids) ban(id);
}

}  // namespace splash
