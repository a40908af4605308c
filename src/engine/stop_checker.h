#pragma once
// Finds stop strings in streamed text, so a client never sees a stop string or a piece of one.
#include <string>
#include <string_view>
#include <vector>

namespace splash {

class StopChecker {
 public:
  // Stop strings must be non-empty (validate() in sampling_params.h checks this).
  explicit StopChecker(std::vector<std::string> stops);

  struct Result {
    std::string emit;  // text safe to show now
    bool stopped = false;
    std::string matched;  // the stop string found, when stopped
  };

  // Appends new text and returns what can be emitted: everything except a suffix that could still
  // grow into a stop string. When a stop string appears, stopped=true and emit ends right before it
  // (the stop string itself is dropped, like OpenAI's API). Among several, the one that completes
  // first wins (then the longer), so the outcome does not depend on how the text was chunked.
  // After a stop, pushes return nothing more. can_stop=false (min_tokens not yet reached) holds
  // back a possible start of a stop string as usual but matches none; later pushes match only stop
  // strings that end in their own new text.
  Result push(std::string_view new_text, bool can_stop = true);

  // The held-back text, for the end of the stream when no stop matched ("" after a stop).
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string held_;  // a suffix that is a proper prefix of some stop string
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace splash
