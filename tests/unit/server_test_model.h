#pragma once
// The fixture's shape as the server sees it (token ids only), shared by the server unit tests.
#include "server/model_info.h"

namespace splash {

inline ModelInfo ids_model() {
  ModelInfo m;
  m.name = "tiny";
  m.context_length = 4096;
  m.vocab_size = 512;
  m.eos = 1;
  return m;
}

}  // namespace splash
