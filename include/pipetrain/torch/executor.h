// PipelineExecutor: runs one rank's part of a schedule Program on a real model.
//
// It interprets the Program and nothing else: there is no schedule-specific code here.
// F runs the stage's layers; B backpropagates; I computes only the input gradient and
// W, later, the weight gradients (the zero-bubble split, both through autograd); SEND
// and RECV move activations and gradients through the DataChannel; ALLREDUCE sums a
// replicated stage's gradients; STEP runs the stage's optimizer and creates the next
// weight version.
//
// Weight versions: every compute action runs on exactly the version the Program names.
// The current version lives in the parameters; a version that a later action still
// reads is stashed (a copy of the weights only, never of optimizer state) at the STEP
// that replaces it and freed at its retirement (schedule::retirements). An action that
// reads a stashed version swaps it into the parameters' storage for its duration. The
// optimizer updates the parameters through aliases that autograd does not track, so a
// backward pass after a STEP reads whatever the storage holds at that moment: the
// stashed version when the Program stashes, the current weights when it does not
// (BackwardWeights::kLatest, PipeMare), optionally corrected (T2).
//
// Gradient scale: a micro-batch's loss is divided by the number of micro-batches whose
// gradients the last stage's next STEP combines, and any stage whose STEP combines a
// different number rescales before stepping, so every STEP applies the mean gradient
// of exactly the micro-batches it combines (a mini-batch, or one round of replicas).
//
// Stage graphs: a stage reads the outputs of any earlier stages' layers (and the model
// input), and sends to each consuming stage one message per micro-batch holding the
// outputs that stage reads (several tensors travel packed as one (N, total) fp32
// tensor). Its backward pass sums the gradients its consumers send back for each
// output, and sends each producing stage the gradients of what it received from it.
//
// The model computes on its device (models::Model::device), in `precision`: forward
// passes run under autocast for bf16. Inputs, labels and received messages are placed
// on that device; the loss stays there until a mini-batch is done.
//
// Receives are posted a few actions ahead of the action that needs them, so messages
// arrive while the rank computes. Message shapes come from a dry run of the model at
// construction, never from the wire.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "pipetrain/schedule/program.h"
#include "pipetrain/torch/models.h"
#include "pipetrain/torch/precision.h"
#include "pipetrain/torch/transport.h"
#include "pipetrain/trace/timeline.h"

namespace pipetrain::runtime {

using Clock = std::chrono::steady_clock;

// The model's layers (indices, increasing: a topological order) that form one stage: a
// run of a chain, or any convex set of a multi-branch model's layers.
struct StageLayers {
  std::vector<int> layers;
  // The forward pass keeps only the stage's inputs and the outputs it sends, and runs
  // again, building the graph, just before the backward pass (plan::Stage::recompute).
  bool recompute = false;
  // With `recompute`: only the first this many of `layers` do so (0: all of them); the
  // rest keep their activations (plan::Stage::recompute_layers).
  int recompute_layers = 0;
};

// Whether a stage runs a layer that reads the model's input (models::kModelInput): its
// ranks need the data's inputs.
bool readsModelInput(const models::Model& model, const StageLayers& stage);

// Data for the Program's micro-batches (indices 0 .. totalMicrobatches - 1): inputs
// (stages reading the model input) and labels (the last stage), each for
// micro-batch_size samples.
// `valid_samples(j)`, when set, says how many leading samples of j count (evaluation
// pads its last batch); unset, all do.
struct MicrobatchData {
  std::function<torch::Tensor(int)> inputs;
  std::function<torch::Tensor(int)> labels;
  std::function<int64_t(int)> valid_samples;
};

// Stage `stage`'s optimizer over its parameters (in models::Model::parameters order).
using OptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(int stage, std::vector<torch::Tensor> params)>;

// What a STEP applies besides the gradients: the rate of a stage's k-th step (the
// learning-rate schedule; PipeMare's T1 multiplies it), and clipping by gradient norm as
// torch.nn.utils.clip_grad_norm_ clips (docs/training.md, "Clipping across stages"):
// - whole_model: the norm of every gradient of the model (each replicated stage's and
//   each tied weight's once), agreed by all ranks before any of them steps. Needs every
//   rank's first STEP of a round to follow all of its gradients of that round, which
//   every synchronous schedule's Program does (schedule::stepsFollowAllGradients).
// - else each stage by the norm of its own gradient (the rule for asynchronous
//   schedules, whose stages step at different times on different micro-batches).
struct StepRecipe {
  std::function<double(int stage, int64_t step)> rate;  // empty: the optimizer's own rate
  double clip_norm = 0;                                 // 0: no clipping
  bool whole_model = true;
};

// Corrections for Programs whose backward passes read the latest weights
// (BackwardWeights::kLatest): PipeMare's T1 and T2 (schedule/staleness.h). Ignored for
// stashing Programs.
struct LatestWeightCorrections {
  bool lr_warmup = false;       // T1
  int64_t warmup_steps = 0;     // K
  bool discrepancy = false;     // T2
  double decay = 0.1;           // D
};

struct RunResult {
  double wait_seconds = 0;                  // blocked in receives and in the final wait for sends
  std::vector<trace::TimedAction> actions;  // compute, STEP, ALLREDUCE; waits excluded
  // Per entry of `actions`, the rank's thread's time on a core meanwhile: the action's
  // work without the time it waited for a core that other ranks held (ranks that
  // outnumber the cores), which its wall time includes. (With several BLAS threads a
  // rank's compute also runs on threads this does not count; such ranks have cores of
  // their own, and their wall times are their work.) On a GPU: the action's time on the
  // device, between events recorded on its stream (action_timer.h), as are its times.
  std::vector<double> action_cpu_seconds;
  int max_sends_held = 0;                   // payloads kept for sends not yet known delivered
};

struct EvalResult {
  double loss_sum = 0;    // sum of per-position losses over the valid samples (last stage)
  int64_t correct = 0;    // correct predictions (positions, for token models)
  int64_t positions = 0;  // predictions made
};

// What this rank's weights cost: per stage, the peak number of versions held at once
// (measured), and the weight-sized buffers the corrections keep.
struct StageWeights {
  int stage = 0;
  int peak_versions = 1;
  int extra_buffers = 0;
  int64_t param_bytes = 0;
};

// A mini-batch's report: its index in the run, its mean loss, when this rank's last
// action on its micro-batches ended (seconds since the run's origin; its STEP comes
// after; on a GPU, when the host had issued it, which the loss read a mini-batch later
// keeps within a mini-batch of the device), and the gradient norm its steps clipped by
// (the whole model's; under per-stage clipping, the latest of this rank's stages'; NaN
// without clipping).
using MinibatchDone = std::function<void(int minibatch, double loss, double ended_seconds, double grad_norm)>;

class PipelineExecutor {
 public:
  // REQUIRES: program validated, stages.size() == program.num_stages, and the stages
  // convex sets of the model's layers whose DAG is the Program's. The model must be
  // built identically on every rank.
  PipelineExecutor(const schedule::Program& program, int rank, models::Model& model,
                   std::vector<StageLayers> stages, int64_t microbatch_size, DataChannel& channel,
                   const OptimizerFactory& make_optimizer, const LatestWeightCorrections& corrections = {},
                   Precision precision = Precision::kFp32, StepRecipe recipe = {});
  ~PipelineExecutor();

  // Runs `program` once: the constructor's, or another of the same plan with another
  // number of mini-batches (training runs an epoch in segments between checkpoints); it
  // must outlive the run. Every run starts from the weights as they are (version 0) and
  // ends drained. `on_minibatch(k, loss, ended)` is called for every mini-batch k of the
  // run, in order, after this rank's last action of mini-batch k + 1 (of k, for the run's
  // last), with the mean loss of the micro-batches of k it ran through the last stage
  // (NaN on ranks without the last stage) and when this rank's last action on k's
  // micro-batches ended (MinibatchDone): the report comes a mini-batch late, its time
  // does not.
  RunResult run(const schedule::Program& program, const MicrobatchData& data, Clock::time_point origin,
                const MinibatchDone& on_minibatch = {});

  // Runs a forward-only Program (schedule::forwardOnly) without gradients; the last stage
  // scores its outputs against the labels.
  EvalResult evaluate(const schedule::Program& forward_only, const MicrobatchData& data);

  // Called before every compute action with the parameters exactly as that action reads
  // them (tests prove weight stashing with it).
  using WeightProbe = std::function<void(const schedule::Action&, const std::vector<torch::Tensor>&)>;
  void setWeightProbe(WeightProbe probe);

  // Bytes of each stage's outputs that later stages read, per micro-batch (each output
  // once, however many stages read it).
  const std::vector<int64_t>& stageOutputBytes() const { return output_bytes_; }
  std::vector<int> stagesOfRank() const { return my_stages_; }
  // Parameters of the stages this rank runs (their current version).
  std::vector<torch::Tensor> parameters() const;
  std::vector<StageWeights> weights() const;

  // What training carries from one run to the next besides the weights, for checkpoints
  // (checkpoint.h), read and replaced between runs only. Per parameter of stage `s`, in
  // the order of models::Model::parameters: the optimizer's state (optimizer_state.h)
  // and T2's velocity ("t2.velocity"), by name. And the stage's optimizer steps so far,
  // which T1's learning-rate ramp counts.
  using TensorMap = std::map<std::string, torch::Tensor>;
  std::vector<TensorMap> parameterState(int s) const;
  void loadParameterState(int s, const std::vector<TensorMap>& state);
  int64_t stepsTaken(int s) const;
  void setStepsTaken(int s, int64_t steps);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<int64_t> output_bytes_;
  std::vector<int> my_stages_;
};

}  // namespace pipetrain::runtime
