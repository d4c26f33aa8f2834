#include "memory_probe.h"

namespace pipetrain::profiler {

MemoryProbe::MemoryProbe(const torch::Device& device) : watch_(runtime::deviceKind(device).watchAllocations(device)) {}

MemoryProbe::~MemoryProbe() = default;

bool MemoryProbe::measures() const { return watch_ != nullptr; }

int64_t MemoryProbe::current() const { return watch_ ? watch_->current() : -1; }

int64_t MemoryProbe::peak() const { return watch_ ? watch_->peak() : -1; }

}  // namespace pipetrain::profiler
