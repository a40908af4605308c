#pragma once
// The fixture checkpoint (../shared/fixtures/tiny-mla-a) and its reference logits, loaded once per
// test binary, and the sampling settings its greedy continuations were made with.
#include <string>

#include "check/reference_check.h"

namespace splash::test {

inline const std::string kFixture = std::string(SPLASH_FIXTURES_DIR) + "/tiny-mla-a";

// The fixture checkpoint itself, opened once.
inline const ModelSource& fixture_model() {
  static const ModelSource src = open_model(kFixture);
  return src;
}

inline const ReferenceSet& reference() {
  static const ReferenceSet ref = load_reference(kFixture + "/reference.safetensors");
  return ref;
}

// n greedy tokens, EOS ignored: what the reference continuations were made with.
inline SamplingParams greedy(int n) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = n;
  p.ignore_eos = true;
  return p;
}

}  // namespace splash::test
