#include "pipetrain/torch/precision.h"

#include <ATen/autocast_mode.h>

#include "pipetrain/util/error.h"

namespace pipetrain::runtime {

Precision parsePrecision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  throw Error("--precision " + name + ": expected fp32 or bf16");
}

const char* precisionName(Precision precision) { return precision == Precision::kBf16 ? "bf16" : "fp32"; }

AutocastScope::AutocastScope(Precision precision, const torch::Device& device) : type_(device.type()) {
  if (precision != Precision::kBf16) return;
  active_ = true;
  was_enabled_ = at::autocast::is_autocast_enabled(type_);
  was_dtype_ = at::autocast::get_autocast_dtype(type_);
  at::autocast::set_autocast_dtype(type_, at::kBFloat16);
  at::autocast::set_autocast_enabled(type_, true);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(type_, was_enabled_);
  at::autocast::set_autocast_dtype(type_, was_dtype_);
}

}  // namespace pipetrain::runtime
