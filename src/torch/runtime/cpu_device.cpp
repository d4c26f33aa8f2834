// The CPU as a device kind (torch/device.h).
//
// Its allocations are counted through LibTorch's default CPU allocator, which reports
// every allocation and free to the thread's memory-reporting hook (the one its own
// profiler uses with profile_memory=true): exact bytes of tensor storage, not the
// process's RSS. Memory that does not come from LibTorch's allocator (OpenBLAS and
// oneDNN scratch buffers, the allocator's own overhead) is not seen. Only allocations on
// the calling thread (and the autograd engine's, which inherits it) are reported, so a
// watch runs LibTorch's intra-op pool at one thread while it is alive.
#include <atomic>

#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#include "pipetrain/torch/device.h"

namespace pipetrain::runtime {
namespace {

namespace impl = torch::profiler::impl;

// The reporting hook. It is a (disabled) profiler state rather than a bare
// c10::MemoryReportingInfoBase because LibTorch's profiler code reads the same
// thread-local slot as a ProfilerStateBase; as one, it answers "profiler disabled" to
// everything but memory reporting.
class AllocationCounter : public impl::ProfilerStateBase {
 public:
  AllocationCounter() : impl::ProfilerStateBase(impl::ProfilerConfig(impl::ProfilerState::Disabled)) {}

  void reportMemoryUsage(void*, int64_t alloc_size, size_t, size_t, c10::Device device) override {
    if (!device.is_cpu()) return;
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
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
};

class CpuAllocationWatch : public AllocationWatch {
 public:
  CpuAllocationWatch() : saved_threads_(at::get_num_threads()), counter_(std::make_shared<AllocationCounter>()) {
    if (saved_threads_ != 1) at::set_num_threads(1);
    hook_ = std::make_unique<c10::DebugInfoGuard>(c10::DebugInfoKind::PROFILER_STATE, counter_);
  }
  ~CpuAllocationWatch() override {
    hook_.reset();  // the hook off before the threads return
    if (saved_threads_ > 1) at::set_num_threads(saved_threads_);
  }
  int64_t current() const override { return counter_->current(); }
  int64_t peak() const override { return counter_->peak(); }

 private:
  int saved_threads_;
  std::shared_ptr<AllocationCounter> counter_;
  std::unique_ptr<c10::DebugInfoGuard> hook_;
};

class Cpu : public DeviceKind {
 public:
  c10::DeviceType type() const override { return c10::DeviceType::CPU; }
  const char* forms() const override { return "cpu"; }
  int count() const override { return 1; }
  std::optional<torch::Device> parse(const std::string& spec, int) const override {
    if (spec == "cpu") return torch::Device(torch::kCPU);
    return std::nullopt;
  }
  std::unique_ptr<AllocationWatch> watchAllocations(const torch::Device&) const override {
    return std::make_unique<CpuAllocationWatch>();
  }
};

}  // namespace

const DeviceKind& cpuDevice() {
  static const Cpu kind;
  return kind;
}

}  // namespace pipetrain::runtime
