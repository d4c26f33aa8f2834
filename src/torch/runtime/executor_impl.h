// Internal to the runtime: the executor's state and its steps, defined in two files:
// executor.cpp (messages, forward passes, steps, and the walk over the rank's actions)
// and executor_backward.cpp (backward passes: recomputation, split I and W, the
// gradients a stage sends back).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "action_timer.h"
#include "forward_replay.h"
#include "gradient_buckets.h"
#include "minibatch_loss.h"
#include "optimizer_state.h"
#include "pipetrain/schedule/rank_facts.h"
#include "pipetrain/torch/executor.h"
#include "split_backward.h"
#include "stage_edges.h"
#include "stage_state.h"
#include "tied_gradients.h"

namespace pipetrain::runtime {

using schedule::Action;
using schedule::ActionType;

// What one (stage, micro-batch) keeps between its forward and backward passes.
struct Activation {
  std::map<int, std::vector<torch::Tensor>> inputs;  // per producer stage: what it sent (leaves)
  std::map<int, torch::Tensor> outputs;              // per layer read by a later stage
  torch::Tensor loss;                                // the last stage's scaled loss
  int consumers_left = 0;                            // forward-only: consumers yet to take the outputs
  bool weights_pending = false;                      // I ran, W has not
  std::map<int, torch::Tensor> input_grads;          // per producer stage: its gradient message, to send
  // Split backward only: each layer's output until I, whose gradients I computes too, so
  // that I runs the chain through every layer of the first stage as the profile times it
  // (the I of each layer with an input gradient); from I on, what W starts from.
  std::vector<torch::Tensor> layer_outputs;
  SplitBackward split;
  // A recomputing stage, from F until the forward pass runs again before B or I.
  std::optional<ForwardReplay> replay;
  // A stage recomputing its first layers: the outputs of those that the other layers or
  // later stages read, as the leaves the rest of the stage's graph starts from (by layer),
  // and under split backward the recomputed layers' I, kept for their W.
  std::vector<std::pair<int, torch::Tensor>> kept;
  SplitBackward recomputed_split;
};

struct PipelineExecutor::Impl {
  const schedule::Program* program;  // the training Program last run (its facts below)
  int rank;
  models::Model& model;
  std::vector<StageLayers> stages;
  DataChannel& channel;
  LatestWeightCorrections corrections;
  Precision precision;
  StepRecipe recipe;
  bool latest = false;  // backward passes read the current weights
  std::map<std::pair<int, int>, Edge> edges;  // (producer stage, consumer stage)
  std::vector<char> reads_input;             // per stage: runs a layer reading the model input
  WeightProbe probe;

  std::map<int, StageState> state;  // per stage of this rank
  std::map<int, std::vector<torch::Tensor>> recomputed_buffers;  // per recomputing stage: its recomputed layers' buffers
  std::map<int, PartRecomputed> part_recomputed;  // per stage of this rank recomputing some of its layers
  std::unique_ptr<TiedGradients> tied;  // models with weights shared between layers

  schedule::RankFacts facts;       // of `program`, derived once per Program
  schedule::RankFacts eval_facts;  // the messages of the last forward-only Program evaluated

  // Per run.
  std::map<std::pair<int, int>, Activation> live;  // (stage, micro-batch)
  // Clipping: per version of this run, the stages of this rank stepping into it (in the
  // order of their STEPs), and the whole model's squared norm and coefficient; under
  // per-stage clipping the latest norm taken here.
  std::map<int, std::vector<int>> steps_into;
  std::map<int, std::pair<torch::Tensor, torch::Tensor>> clip_of_version;
  torch::Tensor latest_squared_norm;
  // A received message, by its slot (schedule::MessageFacts::slot): posted, then arrived,
  // then taken by the pass that reads it.
  struct Mail {
    torch::Tensor buffer;             // defined from posting until taken
    std::unique_ptr<PendingOp> op;    // until arrived
  };
  std::vector<Mail> mailbox;
  struct InFlight {
    torch::Tensor payload;
    std::unique_ptr<PendingOp> op;
  };
  std::map<int, InFlight> sends;  // by position in the Program
  int max_sends_held = 0;
  std::map<int, std::pair<torch::Tensor, int>> minibatch_loss;  // sum (on the device), count

  // The loss of `minibatch` as far as this rank knows it, summed with its replicas'.
  MinibatchLoss minibatchLoss(const schedule::Program& p, int minibatch);

  Impl(const schedule::Program& p, int r, models::Model& m, std::vector<StageLayers> s, DataChannel& t,
       const LatestWeightCorrections& c, Precision precision, StepRecipe recipe);

  // A gradient has the shape of the activations it belongs to.
  void postReceive(const Action& a, const schedule::MessageFacts& m);

  void awaitReceived(const Action& a, const schedule::MessageFacts& m);

  // The message in `slot`, which its consumer takes once.
  torch::Tensor takeMail(int slot);

  // Runs `compute` with the stage's parameters holding the weights action `a` reads.
  void withWeights(const Action& a, const std::function<void()>& compute);

  // Host data (a batch's inputs or labels) onto the model's device without making the
  // host wait: through pinned memory, copied on the device's stream (the caching host
  // allocator keeps the pinned block until the copy has run). A copy from pageable memory
  // would first wait for all the work queued before it, so the device would idle while
  // the host queued the next pass.
  torch::Tensor toDevice(const torch::Tensor& t, int stage) const;

  // The stage's inputs by producer name: what its producer stages sent, as leaves that
  // collect gradients when training, and the model input where a layer reads it.
  std::map<std::string, torch::Tensor> takeInputs(const schedule::Program& p, const Action& a,
                                                  const schedule::PositionFacts& at, const MicrobatchData& data,
                                                  bool training,
                                                  std::map<int, std::vector<torch::Tensor>>* leaves);

  // The outputs of the stage's layers that later stages read.
  std::map<int, torch::Tensor> sentOutputs(const schedule::Program& p, int s,
                                           const std::map<std::string, torch::Tensor>& values) const;

  const torch::Tensor& modelOutput(const std::map<std::string, torch::Tensor>& values) const;

  void forward(const schedule::Program& p, const Action& a, const schedule::PositionFacts& at,
               const MicrobatchData& data);

  void evalForward(const schedule::Program& p, const Action& a, const schedule::PositionFacts& at,
                   const MicrobatchData& data, EvalResult& result);

  // A stage recomputing every layer, before B or I: its forward pass again (forwardAgain),
  // and from there what the backward pass starts from.
  void recomputeForward(const Action& a);

  // `layers` of a recomputing stage again, now building the graph, from the stage's
  // inputs at F, on the weights F read (stashed where a step came between) and its random
  // stream (ForwardReplay). Their outputs, with the inputs.
  std::map<std::string, torch::Tensor> forwardAgain(const Action& a, const std::vector<int>& layers);

  // What the backward pass starts from: the scaled loss on the last stage; elsewhere the
  // outputs later stages read, each with the sum of the gradients its consumers sent.
  std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> backwardRoots(const Action& a,
                                                                                const schedule::PositionFacts& at);

  // Stage s's input gradients (in the order of act.inputs' leaves), packed per producer
  // stage as its message. An input no path used gets zeros.
  void packInputGrads(int s, Activation& act, const std::vector<torch::Tensor>& grads);

  void backward(const Action& a, const schedule::PositionFacts& at);

  // B or I of a stage recomputing its first layers (PartRecomputed), in two engine calls:
  // the rest of the stage from its roots down to the kept outputs, then the first layers,
  // run again, from those outputs with the gradients that reached them. The stage's
  // inputs collect from both; the gradients of `leaves` (its inputs) are returned.
  std::vector<torch::Tensor> backwardInTwo(const Action& a, const PartRecomputed& part,
                                           const std::vector<torch::Tensor>& roots,
                                           const std::vector<torch::Tensor>& root_grads,
                                           const std::vector<torch::Tensor>& leaves);

  // W: the parameters' gradients from what I kept.
  void weightBackward(const Action& a);

  // Drops a micro-batch's activation once its W has run and every gradient message it
  // owes a producer stage has gone.
  void finishIfDone(int s, int j);

  void send(const Action& a, int position, const schedule::MessageFacts& m, bool training);

  // These sends have certainly been delivered (NOTE(send-release) in schedule/rank_facts.cpp).
  void releaseDeliveredSends(const schedule::PositionFacts& at);

  // The buckets of the pass that completed the gradients are mostly reduced already.
  void allReduce(int s);

  // Before the backward pass that completes a replicated stage's gradients: reduce each
  // bucket as soon as that pass has finished it.
  void armBuckets(const schedule::PositionFacts& at);

  // The stage's next version (stage_state.h), with this rank's scale for its gradients,
  // the warm-up's rate and, under PipeMare, T1's factor on it and T2's decay for the
  // stage's delay.
  void step(const Action& a, const schedule::PositionFacts& at);

  // The coefficient stage a.stage's gradients take at STEP `a` (StepRecipe's rules). The
  // whole model's is taken at this rank's first STEP of the round, once the tied weights'
  // gradients are summed, with every rank of the job.
  torch::Tensor clipCoefficientAt(const Action& a);

  // The gradient norm to report with mini-batch `minibatch` of the run (MinibatchDone).
  double reportedNorm(int minibatch);

  // Runs `p` (the training Program, or a forward-only one when `eval` is given).
  RunResult execute(const schedule::Program& p, const MicrobatchData& data, Clock::time_point origin,
                    const MinibatchDone& on_minibatch, EvalResult* eval);
};

}  // namespace pipetrain::runtime
