#pragma once
// The channel between the engine thread and one HTTP request: the request's K engine requests
// (choices) are admitted or rejected together, then their tokens arrive as deltas until each
// finishes. The engine thread pushes; the handler thread waits and takes.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "engine/request.h"

namespace splash {

// What one engine step produced for one choice.
struct TokenDelta {
  int index = 0;  // the choice, in submission order
  std::vector<int32_t> tokens;
  std::string text;  // newly completed text (stop strings cut); empty without a tokenizer
  std::vector<float> logprobs;                      // one per token, when asked for
  std::vector<std::vector<TokenLogprob>> top;       // one list per token, when top-n was asked for
  FinishReason finish = FinishReason::None;         // set on the choice's last delta
  std::string error;                                // when finish == Error: what the client may read
  int error_status = 500;                           // when finish == Error: 4xx the client's fault, 5xx ours
  double latency_s = 0;                             // arrival to finish, on the last delta
  int64_t cached_tokens = 0;                        // prompt tokens found in the prefix cache, on the last delta
  std::string weight_version;                       // of the weights that produced it (Engine::weight_version)
};

class ResultStream {
 public:
  explicit ResultStream(size_t choices) : choices_(choices) {}
  size_t choices() const { return choices_; }

  // Engine thread.
  void admit();
  void reject(int status, std::string why);
  void push(TokenDelta d);

  // Handler thread. Blocks until the engine thread has admitted or rejected the request.
  struct Admission {
    int status = 200;  // 200 admitted, else the HTTP status of the rejection
    std::string error;
  };
  Admission wait_admission();
  // Waits up to `timeout` for deltas and takes them all (none on timeout).
  std::vector<TokenDelta> next(std::chrono::milliseconds timeout);
  // Every choice has finished and its deltas were taken.
  bool done() const;

 private:
  const size_t choices_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool decided_ = false;
  Admission admission_;
  std::deque<TokenDelta> queue_;
  size_t finished_ = 0;
};

}  // namespace splash
