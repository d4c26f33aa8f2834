#include "layer_run.h"

#include "memory_probe.h"

namespace pipetrain::profiler {

void synchronize(const torch::Device& device) { runtime::deviceKind(device).synchronize(device); }

Memory measureMemory(const LayerRun& run, const torch::Device& device) {
  MemoryProbe probe(device);
  if (!probe.measures()) return {};
  Memory m;
  {  // Tensors made under the probe are freed under it too, so its books balance.
    torch::Tensor y = run.forward();
    synchronize(device);
    m.saved = probe.current();
    const std::vector<torch::Tensor> grads = run.backward(y, torch::ones_like(y));
    synchronize(device);
    m.peak = probe.peak();
  }
  {  // Again, split: what stays after I is what W needs (the input gradients go to the producer).
    const int64_t before = probe.current();
    torch::Tensor y = run.forward();
    runtime::SplitBackward split;
    run.inputBackward(split, y, torch::ones_like(y));
    synchronize(device);
    m.split = probe.current() - before;
  }
  return m;
}

}  // namespace pipetrain::profiler
