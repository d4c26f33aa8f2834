#include "pipetrain/util/limits.h"

#include "pipetrain/util/error.h"

namespace pipetrain::limits {

void checkProgramSize(int64_t stages, int64_t microbatches, int64_t minibatches, const std::string& what) {
  if (stages > kMaxStages)
    throw Error(what + ": " + std::to_string(stages) + " stages; pipetrain serves at most " +
                std::to_string(kMaxStages));
  if (microbatches > kMaxMicrobatches)
    throw Error(what + ": " + std::to_string(microbatches) + " micro-batches per mini-batch; pipetrain serves at most " +
                std::to_string(kMaxMicrobatches));
  // Each factor is bounded above, so the product fits in 64 bits.
  if (stages > 0 && microbatches > 0 && minibatches > kMaxComputeActions / (stages * microbatches) / 3)
    throw Error(what + ": " + std::to_string(stages) + " stages x " + std::to_string(microbatches) +
                " micro-batches x " + std::to_string(minibatches) + " mini-batches is more than the " +
                std::to_string(kMaxComputeActions) + " actions one Program may hold; simulate fewer mini-batches");
}

}  // namespace pipetrain::limits
