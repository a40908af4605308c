#include "server/result_stream.h"

namespace splash {

void ResultStream::admit() {
  std::lock_guard lk(mu_);
  decided_ = true;
  cv_.notify_all();
}

void ResultStream::reject(int status, std::string why) {
  std::lock_guard lk(mu_);
  decided_ = true;
  admission_ = {status, std::move(why)};
  cv_.notify_all();
}

void ResultStream::push(TokenDelta d) {
  std::lock_guard lk(mu_);
  if (d.finish != FinishReason::None) ++finished_;
  queue_.push_back(std::move(d));
  cv_.notify_all();
}

ResultStream::Admission ResultStream::wait_admission() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return decided_; });
  return admission_;
}

std::vector<TokenDelta> ResultStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  cv_.wait_for(lk, timeout, [&] { return !queue_.empty(); });
  std::vector<TokenDelta> out(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
  queue_.clear();
  return out;
}

bool ResultStream::done() const {
  std::lock_guard lk(mu_);
  return finished_ == choices_ && queue_.empty();
}

}  // namespace splash
