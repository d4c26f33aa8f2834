// The arithmetic of training: fp32 throughout, or bf16 by autocast. Under bf16 the
// parameters and the optimizer's state stay fp32 (the master weights); each forward pass
// casts them and computes in bf16 where autocast's op lists say so (matrix products,
// convolutions), and in fp32 elsewhere (losses, norms, softmax).
#pragma once

#include <string>

#include <torch/torch.h>

namespace pipetrain::runtime {

enum class Precision { kFp32, kBf16 };

// "fp32" or "bf16"; anything else is an Error naming --precision.
Precision parsePrecision(const std::string& name);
const char* precisionName(Precision precision);

// Autocast on `device` for the scope's lifetime when `precision` is bf16 (nothing
// otherwise). Leaving the scope drops autocast's cache of cast weights: the next pass
// must cast them anew, since an optimizer step or a swapped-in weight version changes
// them in place.
class AutocastScope {
 public:
  AutocastScope(Precision precision, const torch::Device& device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType type_;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kFloat;
};

}  // namespace pipetrain::runtime
