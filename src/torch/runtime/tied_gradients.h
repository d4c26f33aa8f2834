// Weights tied between layers that sit on different stages (GPT-2's input and output
// embeddings on the first and last): every holder keeps its own copy, and before a STEP
// each copy's gradient becomes the sum over all holders, as Megatron sums the embedding
// gradients of its first and last stages. The copies then take the same step and stay
// equal, as the one shared weight of single-process training would.
//
// Needs a synchronous schedule (the trainer refuses the others): every holder stage
// steps once per mini-batch into the same version, after all its backward passes.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <vector>

#include <torch/torch.h>

#include "pipetrain/schedule/program.h"
#include "pipetrain/torch/executor.h"
#include "pipetrain/torch/models.h"
#include "pipetrain/torch/transport.h"

namespace pipetrain::runtime {

// The stage of each of `weight`'s holders, in holder order. Throws Error for a holder
// on no stage.
std::vector<int> holderStages(const models::TiedWeight& weight, const std::vector<StageLayers>& stages);

class TiedGradients {
 public:
  // The tied weights that this rank's stages hold. Readies each one's all-reduce group
  // (every rank holding a copy, replicas included), in the model's order on every rank.
  // Throws Error where the Program steps one of this rank's holder stages before another
  // one's backward passes and all-reduces of that mini-batch are done.
  TiedGradients(const models::Model& model, const std::vector<StageLayers>& stages, const schedule::Program& program,
                int rank, DataChannel& channel);

  // Before `stage` steps into `version`: once per weight and version, every copy this
  // rank holds gets the sum of all holders' gradients. `factor(stage, version)` is the
  // scale the STEP will apply to that stage's gradients; the sum is of scaled gradients,
  // each replicated stage's counted once, so every copy steps with the same gradient.
  void beforeStep(int stage, int version, const std::function<double(int, int)>& factor);

  // Whether `param` is a copy of a tied weight held by a holder other than its first:
  // after beforeStep it holds the first one's gradient, which a norm counts once.
  bool isLaterCopy(const torch::Tensor& param) const { return later_copies_.count(param.unsafeGetTensorImpl()) > 0; }

 private:
  struct Copy {
    int stage;
    torch::Tensor param;
    int replicas;  // of its stage: each replica holds the stage's whole gradient after its all-reduce
  };
  struct Group {
    std::vector<Copy> copies;  // on this rank
    std::vector<int> ranks;    // the all-reduce's, sorted; empty when one stage holds every copy
    int reduced_version = -1;
  };

  DataChannel& channel_;
  std::vector<Group> groups_;
  std::map<int, std::vector<int>> groups_of_stage_;
  std::set<const void*> later_copies_;  // by TensorImpl
};

}  // namespace pipetrain::runtime
