// PipelineExecutor: runs one rank's part of a schedule Program on a real model.
//
// It interprets the Program and nothing else: there is no schedule-specific code here.
// F runs the stage's layers; B backpropagates; I computes only the input gradient and
// W, later, the weight gradients (the zero-bubble split, both through autograd); SEND
// and RECV move activations and gradients through the Transport; ALLREDUCE sums a
// replicated stage's gradients; STEP runs the stage's optimizer.
//
// Receives are posted a few actions ahead of the action that needs them, so messages
// arrive while the rank computes. Message shapes come from a dry run of the model at
// construction, never from the wire.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "pipetrain/schedule/program.h"
#include "pipetrain/torch/models.h"
#include "pipetrain/torch/transport.h"
#include "pipetrain/trace/timeline.h"

namespace pipetrain::runtime {

using Clock = std::chrono::steady_clock;

// Layers [first, last) of the model form one stage.
struct StageLayers {
  int first = 0;
  int last = 0;
};

// Per-micro-batch data for one mini-batch: micro-batch j's inputs (first stage only)
// and labels (last stage only), each for micro-batch_size samples.
struct MicrobatchData {
  std::function<torch::Tensor(int)> inputs;
  std::function<torch::Tensor(int)> labels;
};

using OptimizerFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

struct MinibatchResult {
  double loss = 0;        // mean loss over the mini-batch (last-stage ranks; 0 elsewhere)
  bool has_loss = false;
  double wait_seconds = 0;  // blocked in receives and in the final wait for sends
  std::vector<trace::TimedAction> actions;  // compute, STEP, ALLREDUCE, waits excluded
};

class PipelineExecutor {
 public:
  // REQUIRES: program validated, program.minibatches == 1, every stage has at most one
  // predecessor (chains; graph stages come with the GraphPipe work), stages.size() ==
  // program.num_stages. The model must be built identically on every rank.
  PipelineExecutor(const schedule::Program& program, int rank, models::Model& model,
                   std::vector<StageLayers> stages, int64_t microbatch_size, Transport& transport,
                   const OptimizerFactory& make_optimizer);
  ~PipelineExecutor();

  MinibatchResult runMinibatch(const MicrobatchData& data, Clock::time_point origin);

  // Output shape (with the batch dimension) of each stage for one micro-batch.
  const std::vector<std::vector<int64_t>>& stageOutputShapes() const { return output_shapes_; }
  std::vector<int> stagesOfRank() const { return my_stages_; }
  // Parameters of the stages this rank runs.
  std::vector<torch::Tensor> parameters() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<std::vector<int64_t>> output_shapes_;
  std::vector<int> my_stages_;
};

// Message tag shared by sender and receiver: unique per edge, direction and micro-batch.
uint32_t messageTag(bool backward, int producer, int consumer, int microbatch, int num_stages,
                    int microbatches);

}  // namespace pipetrain::runtime
