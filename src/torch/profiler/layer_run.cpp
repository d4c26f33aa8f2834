#include "layer_run.h"

#include "memory_probe.h"

namespace pipetrain::profiler {

void synchronize(const torch::Device& device) { runtime::deviceKind(device).synchronize(device); }

Memory measureMemory(const LayerRun& run, const torch::Device& device, const torch::Tensor& loss_labels) {
  const auto forward = [&] { return loss_labels.defined() ? run.loss(run.forward(), loss_labels) : run.forward(); };
  Memory m;
  {  // Tensors made under the probe are freed under it too, so its books balance.
    MemoryProbe probe(device);
    if (!probe.measures()) return {};
    torch::Tensor y = forward();
    synchronize(device);
    m.saved = probe.current();
    const std::vector<torch::Tensor> grads = run.backward(y, torch::ones_like(y));
    synchronize(device);
    m.peak = probe.peak();
  }
  {  // Again, split: what stays after I is what W needs (the input gradients go to the
     // producer). A probe of its own, for the peak of the forward pass and I alone, and
     // then one for W, from what I left.
    torch::Tensor y;
    runtime::SplitBackward split;
    {
      MemoryProbe probe(device);
      y = forward();
      run.inputBackward(split, y, torch::ones_like(y));
      synchronize(device);
      m.split = probe.current();
      m.split_peak = probe.peak();
    }
    MemoryProbe probe(device);
    const std::vector<torch::Tensor> gradients = split.weightGradients();
    synchronize(device);
    m.weight_peak = probe.peak();
  }
  return m;
}

}  // namespace pipetrain::profiler
