#include "layer_run.h"

#include <algorithm>

#include "memory_probe.h"
#include "pipetrain/util/process_memory.h"

namespace pipetrain::profiler {

void synchronize(const torch::Device& device) { runtime::deviceKind(device).synchronize(device); }

namespace {

// On the CPU, the process's resident set over a pass as well as its tensors: the kernels'
// passing buffers come from the heap beside them (oneDNN's scratch, a gpt block's 3-5 MiB
// beside 11 MiB of tensors at 16 samples), and the process holds them at its peak. The
// heap's free pages go back first, so that the pass's allocations grow the resident set
// even where they reuse memory freed before.
class ResidentPeak {
 public:
  explicit ResidentPeak(const torch::Device& device) : on_(start(device)), start_(on_ ? util::residentBytes() : 0) {}
  // `tensor_peak`, or the resident set's growth where that is larger.
  int64_t atLeast(int64_t tensor_peak) const {
    return on_ ? std::max(tensor_peak, util::residentPeakSinceRestart() - start_) : tensor_peak;
  }

 private:
  static bool start(const torch::Device& device) {
    if (!device.is_cpu()) return false;
    util::returnFreeHeapPages();
    return util::restartResidentPeak();
  }
  bool on_;
  int64_t start_;
};

}  // namespace

Memory measureMemory(const LayerRun& run, const torch::Device& device) {
  Memory m;
  {  // Tensors made under the probe are freed under it too, so its books balance.
    const ResidentPeak resident(device);
    MemoryProbe probe(device);
    if (!probe.measures()) return {};
    torch::Tensor y = run.forward();
    synchronize(device);
    m.saved = probe.current();
    const std::vector<torch::Tensor> grads = run.backward(y, torch::ones_like(y));
    synchronize(device);
    m.peak = resident.atLeast(probe.peak());
  }
  {  // Again, split: what stays after I is what W needs (the input gradients go to the
     // producer). A probe of its own, for the peak of the forward pass and I alone.
    const ResidentPeak resident(device);
    MemoryProbe probe(device);
    torch::Tensor y = run.forward();
    runtime::SplitBackward split;
    run.inputBackward(split, y, torch::ones_like(y));
    synchronize(device);
    m.split = probe.current();
    m.split_peak = resident.atLeast(probe.peak());
  }
  return m;
}

}  // namespace pipetrain::profiler
