#include "engine/stop_checker.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace splash {

StopChecker::StopChecker(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string& s : stops_) SPLASH_CHECK(!s.empty(), "empty stop string");
}

namespace {

// Longest suffix of `text` that is a proper prefix of `stop`.
size_t partial_match(std::string_view text, std::string_view stop) {
  for (size_t k = std::min(text.size(), stop.size() - 1); k > 0; --k)
    if (text.ends_with(stop.substr(0, k))) return k;
  return 0;
}

}  // namespace

StopChecker::Result StopChecker::push(std::string_view new_text, bool can_stop) {
  if (stopped_) return {"", true, matched_};
  const size_t old_size = held_.size();
  held_ += new_text;
  // Text before held_ was emitted only because no stop string could start in it, so searching
  // held_ is enough; a match must end in the new text (one that ended earlier came while stops
  // were suppressed).
  size_t best_pos = std::string::npos, best_end = std::string::npos;
  const std::string* best = nullptr;
  for (const std::string& s : stops_) {
    const size_t pos = can_stop ? held_.find(s, old_size >= s.size() ? old_size - s.size() + 1 : 0) : std::string::npos;
    if (pos == std::string::npos) continue;
    const size_t end = pos + s.size();
    if (end < best_end || (end == best_end && pos < best_pos)) {
      best_pos = pos;
      best_end = end;
      best = &s;
    }
  }
  if (best) {
    stopped_ = true;
    matched_ = *best;
    Result r{held_.substr(0, best_pos), true, matched_};
    held_.clear();
    return r;
  }
  size_t hold = 0;
  for (const std::string& s : stops_) hold = std::max(hold, partial_match(held_, s));
  Result r{held_.substr(0, held_.size() - hold), false, {}};
  held_.erase(0, held_.size() - hold);
  return r;
}

std::string StopChecker::flush() { return std::exchange(held_, {}); }

}  // namespace splash
