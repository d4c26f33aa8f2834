#include "memory_probe.h"

#include <atomic>

#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#ifdef PIPETRAIN_WITH_CUDA  // set by CMakeLists.txt for CUDA builds of LibTorch
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace pipetrain::profiler {
namespace {

namespace impl = torch::profiler::impl;

// The CPU allocator's reporting hook. It is a (disabled) profiler state rather than a
// bare c10::MemoryReportingInfoBase because LibTorch's profiler code reads the same
// thread-local slot as a ProfilerStateBase; as one, it answers "profiler disabled" to
// everything but memory reporting.
class AllocationCounter : public impl::ProfilerStateBase {
 public:
  explicit AllocationCounter(c10::DeviceType type)
      : impl::ProfilerStateBase(impl::ProfilerConfig(impl::ProfilerState::Disabled)), type_(type) {}

  void reportMemoryUsage(void*, int64_t alloc_size, size_t, size_t, c10::Device device) override {
    if (device.type() != type_) return;
    const int64_t now = current_.fetch_add(alloc_size) + alloc_size;
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
  }
  bool memoryProfilingEnabled() const override { return true; }
  impl::ActiveProfilerType profilerType() override { return impl::ActiveProfilerType::NONE; }

  int64_t current() const { return current_.load(); }
  int64_t peak() const { return peak_.load(); }

 private:
  c10::DeviceType type_;
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
};

#ifdef PIPETRAIN_WITH_CUDA
// The caching allocator's allocated bytes on GPU `index`: current and peak.
c10::CachingAllocator::Stat allocatedBytes(int index) {
  constexpr auto kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  return c10::cuda::CUDACachingAllocator::getDeviceStats(index).allocated_bytes[kAggregate];
}
#endif

}  // namespace

struct MemoryProbe::State {
  torch::Device device{torch::kCPU};
  // CPU
  std::shared_ptr<AllocationCounter> counter;
  std::unique_ptr<c10::DebugInfoGuard> hook;
  int saved_threads = 0;
  // CUDA
  bool cuda_stats = false;
  int64_t cuda_base = 0;
};

MemoryProbe::MemoryProbe(const torch::Device& device) : state_(std::make_unique<State>()) {
  state_->device = device;
  if (device.is_cpu()) {
    // Allocations on intra-op worker threads would go unreported (the hook is
    // thread-local and OpenMP workers do not inherit it): one thread while measuring.
    state_->saved_threads = at::get_num_threads();
    if (state_->saved_threads != 1) at::set_num_threads(1);
    state_->counter = std::make_shared<AllocationCounter>(c10::DeviceType::CPU);
    state_->hook = std::make_unique<c10::DebugInfoGuard>(c10::DebugInfoKind::PROFILER_STATE, state_->counter);
  }
#ifdef PIPETRAIN_WITH_CUDA
  if (device.is_cuda()) {
    namespace alloc = c10::cuda::CUDACachingAllocator;
    const int index = device.has_index() ? device.index() : 0;
    alloc::resetPeakStats(index);
    state_->cuda_base = allocatedBytes(index).current;
    state_->cuda_stats = true;
  }
#endif
}

MemoryProbe::~MemoryProbe() {
  state_->hook.reset();
  if (state_->saved_threads > 1) at::set_num_threads(state_->saved_threads);
}

bool MemoryProbe::measures() const { return state_->counter || state_->cuda_stats; }

int64_t MemoryProbe::current() const {
  if (state_->counter) return state_->counter->current();
#ifdef PIPETRAIN_WITH_CUDA
  if (state_->cuda_stats) {
    return allocatedBytes(state_->device.has_index() ? state_->device.index() : 0).current - state_->cuda_base;
  }
#endif
  return -1;
}

int64_t MemoryProbe::peak() const {
  if (state_->counter) return state_->counter->peak();
#ifdef PIPETRAIN_WITH_CUDA
  if (state_->cuda_stats) {
    return allocatedBytes(state_->device.has_index() ? state_->device.index() : 0).peak - state_->cuda_base;
  }
#endif
  return -1;
}

}  // namespace pipetrain::profiler
