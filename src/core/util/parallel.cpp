#include "pipetrain/util/parallel.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace pipetrain::util {

void parallelFor(std::size_t n, const std::function<void(std::size_t)>& work) {
  const std::size_t threads = std::min<std::size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  if (threads <= 1) {
    for (std::size_t i = 0; i < n; ++i) work(i);
    return;
  }
  std::atomic<std::size_t> next{0};
  auto drain = [&] {
    for (std::size_t i = next++; i < n; i = next++) work(i);
  };
  std::vector<std::thread> helpers;
  for (std::size_t t = 1; t < threads; ++t) helpers.emplace_back(drain);
  drain();
  for (std::thread& h : helpers) h.join();
}

}  // namespace pipetrain::util
