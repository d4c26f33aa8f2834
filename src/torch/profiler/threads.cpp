// The threads a profile computes on, and how a step's time divides over them.
#include <algorithm>
#include <chrono>
#include <vector>

#include "threads_guard.h"
#include "pipetrain/torch/profiler.h"
#include "pipetrain/util/stats.h"

namespace pipetrain::profiler {

int blasThreads() {
  auto get = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return get ? get() : 0;
}

int computeThreads() { return std::max(at::get_num_threads(), blasThreads()); }

void useThreadsOfARank(int threads) {
  if (SetBlasThreads set = blasSetter()) {
    set(threads);
    at::set_num_threads(1);
  } else {
    at::set_num_threads(threads);
  }
}

// NOTE(thread-speedup): a standalone profile times the whole model on every core, and a
// plan may put its stages on ranks with fewer (two ranks on a 2-core host: one each).
// What the profile's times become there depends on how the model's kernels divide over
// threads, which only a measurement says. The two are timed back to back and their ratio
// kept, over several rounds, because this machine's speed moves by tens of percent within
// seconds, and its second core's with it (docs/profiling.md, "A profile taken on other
// threads"). So rounds go on for a while: at least kMinRounds, then more until
// kBudgetSeconds have passed, at most kMaxRounds (a large model's step on one thread
// takes seconds).
ThreadSpeedup threadSpeedup(const models::Model& model, int64_t batch, runtime::Precision precision) {
  constexpr int kMinRounds = 3, kMaxRounds = 15;
  constexpr double kBudgetSeconds = 3;
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  std::vector<double> ratios;
  while (ratios.size() < static_cast<std::size_t>(kMinRounds) ||
         (ratios.size() < static_cast<std::size_t>(kMaxRounds) && elapsed() < kBudgetSeconds)) {
    double one = 0;
    {
      ThreadsGuard as_they_were;
      useThreadsOfARank(1);
      one = stepSeconds(model, batch, 0, precision);
    }
    ratios.push_back(one / stepSeconds(model, batch, 0, precision));
  }
  return {util::median(ratios), static_cast<int>(ratios.size())};
}

}  // namespace pipetrain::profiler
