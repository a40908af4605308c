#include "core/parallel_chunks.h"

#include <algorithm>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace splash {

void parallel_chunks(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t chunks = std::clamp<int64_t>(n / std::max<int64_t>(1, min_chunk), 1, cores);
  if (chunks == 1) return fn(0, n);
  std::exception_ptr error;
  std::mutex mu;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(chunks));
  for (int64_t c = 0; c < chunks; ++c)
    threads.emplace_back([&, c] {
      try {
        fn(n * c / chunks, n * (c + 1) / chunks);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu);
        if (!error) error = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace splash
