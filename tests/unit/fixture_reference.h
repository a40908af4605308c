#pragma once
// The fixture checkpoint (../shared/fixtures/tiny-mla-a) and its reference logits, loaded once per
// test binary.
#include <string>

#include "check/reference_check.h"

namespace splash::test {

inline const std::string kFixture = std::string(SPLASH_FIXTURES_DIR) + "/tiny-mla-a";

inline const ReferenceSet& reference() {
  static const ReferenceSet ref = load_reference(kFixture + "/reference.safetensors");
  return ref;
}

}  // namespace splash::test
