#include "core_probe.h"

#include <chrono>

#include <torch/torch.h>

#include "pipetrain/util/core_time.h"

namespace pipetrain::runtime {

double coreProbeSeconds() {
  static const torch::Tensor a = torch::full({256, 256}, 0.5f), b = torch::full({256, 256}, 0.25f);
  at::mm(a, b);  // the operands into the caches (core_probe.h)
  const util::ThreadCoreTime before = util::threadCoreTime();
  const auto start = std::chrono::steady_clock::now();
  for (int k = 0; k < 4; ++k) at::mm(a, b);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const util::ThreadCoreTime after = util::threadCoreTime();
  // The core's speed, not its sharing: time spent runnable while other ranks held every
  // core is the simulator's to price (waiting for a core), and would make a rank that
  // shares its core look like one on a slow core.
  const double waited = after.waiting_seconds - before.waiting_seconds;
  return before.waiting_seconds >= 0 && after.waiting_seconds >= 0 && waited < wall ? wall - waited : wall;
}

}  // namespace pipetrain::runtime
