#include "pipetrain/torch/executor.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "action_timer.h"
#include "forward_replay.h"
#include "gradient_buckets.h"
#include "minibatch_loss.h"
#include "optimizer_state.h"
#include "split_backward.h"
#include "stage_edges.h"
#include "stage_state.h"
#include "tied_gradients.h"
#include "pipetrain/schedule/rank_facts.h"
#include "pipetrain/sim/cost_model.h"
#include "pipetrain/util/error.h"

namespace pipetrain::runtime {

using schedule::Action;
using schedule::ActionType;

namespace {

// How many actions ahead receives are posted: enough to cover a rank's warm-up
// forwards without holding every buffer of a long mini-batch at once.
constexpr int kReceiveLookahead = 8;

// Gradient buckets for replicated stages: sim::kGradientBucketBytes, which the simulator
// prices (a 1024 x 1024 layer per bucket; DDP's default of 25 MiB would make the 8 x 1024
// mlp one bucket and overlap nothing). Not tuned further.

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

}  // namespace

struct PipelineExecutor::Impl {
  const schedule::Program* program;  // the training Program last run (its facts below)
  int rank;
  models::Model& model;
  std::vector<StageLayers> stages;
  DataChannel& channel;
  LatestWeightCorrections corrections;
  Precision precision;
  int64_t lr_warmup_steps = 0;  // TrainConfig's
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
  MinibatchLoss minibatchLoss(const schedule::Program& p, int minibatch) {
    const auto [sum, count] = minibatch_loss[minibatch];
    minibatch_loss.erase(minibatch);
    for (const auto& [s, st] : state)
      if (p.isLastStage(s)) return MinibatchLoss(minibatch, sum, count, st.device, p.stage_ranks[s], channel);
    return MinibatchLoss(minibatch);
  }

  Impl(const schedule::Program& p, int r, models::Model& m, std::vector<StageLayers> s, DataChannel& t,
       const LatestWeightCorrections& c, Precision precision, int64_t warmup)
      : program(&p), rank(r), model(m), stages(std::move(s)), channel(t), corrections(c), precision(precision),
        lr_warmup_steps(warmup), latest(p.backward_weights == schedule::BackwardWeights::kLatest) {}

  // A gradient has the shape of the activations it belongs to.
  void postReceive(const Action& a, const schedule::MessageFacts& m) {
    const Edge& edge = edges.at({m.producer, m.consumer});
    Mail& mail = mailbox.at(m.slot);
    mail.buffer = torch::empty(edge.messageShape(), torch::dtype(edge.dtype).device(state.at(a.stage).device));
    mail.op = channel.recv(mail.buffer, m.peer, m.tag);
  }

  void awaitReceived(const Action& a, const schedule::MessageFacts& m) {
    Mail& mail = mailbox.at(m.slot);
    if (!mail.op) throw Error("internal: receive not posted for " + schedule::toString(a));
    mail.op->wait();
    mail.op.reset();
  }

  // The message in `slot`, which its consumer takes once.
  torch::Tensor takeMail(int slot) {
    Mail& mail = mailbox.at(slot);
    if (!mail.buffer.defined() || mail.op) throw Error("internal: no message has arrived in slot " + std::to_string(slot));
    return std::exchange(mail.buffer, torch::Tensor());
  }

  // Runs `compute` with the stage's parameters holding the weights action `a` reads.
  void withWeights(const Action& a, const std::function<void()>& compute) {
    StageState& st = state.at(a.stage);
    // T2: a backward pass on the current version runs on w - tau x delta, an estimate
    // of the weights its forward pass read tau steps ago.
    const bool t2 = latest && corrections.discrepancy && (a.type == ActionType::B || a.type == ActionType::I);
    const int tau = t2 ? st.version - facts.forward_version.at({a.stage, a.microbatch}) : 0;
    auto what = [&] {
      return "rank " + std::to_string(rank) + ": " + schedule::toString(a) + " of stage " + std::to_string(a.stage);
    };
    withVersion(st, a.version, tau, what, [&] {
      if (probe) probe(a, st.params);
      compute();
    });
  }

  // Host data (a batch's inputs or labels) onto the model's device without making the
  // host wait: through pinned memory, copied on the device's stream (the caching host
  // allocator keeps the pinned block until the copy has run). A copy from pageable memory
  // would first wait for all the work queued before it, so the device would idle while
  // the host queued the next pass.
  torch::Tensor toDevice(const torch::Tensor& t, int stage) const {
    const torch::Device device = state.at(stage).device;
    if (device.is_cpu()) return t;
    return t.pin_memory().to(device, /*non_blocking=*/true);
  }

  // The stage's inputs by producer name: what its producer stages sent, as leaves that
  // collect gradients when training, and the model input where a layer reads it.
  std::map<std::string, torch::Tensor> takeInputs(const schedule::Program& p, const Action& a,
                                                  const schedule::PositionFacts& at, const MicrobatchData& data,
                                                  bool training,
                                                  std::map<int, std::vector<torch::Tensor>>* leaves) {
    const int s = a.stage, j = a.microbatch;
    std::map<std::string, torch::Tensor> values;
    if (reads_input[s]) values[models::kModelInput] = toDevice(data.inputs(j), s);
    for (std::size_t k = 0; k < p.stage_preds[s].size(); ++k) {
      const int q = p.stage_preds[s][k];
      const Edge& edge = edges.at({q, s});
      std::vector<torch::Tensor> tensors;
      if (at.input_slots[k] < 0) {
        Activation& producer = live.at({q, j});
        for (int l : edge.layers) tensors.push_back(producer.outputs.at(l).detach());
        if (!training && --producer.consumers_left == 0) live.erase({q, j});
      } else {
        tensors = edge.unpack(takeMail(at.input_slots[k]));
      }
      for (std::size_t k = 0; k < tensors.size(); ++k) {
        if (training) tensors[k] = tensors[k].detach().requires_grad_(true);
        values[model.layers[edge.layers[k]].name] = tensors[k];
      }
      if (leaves) (*leaves)[q] = std::move(tensors);
    }
    return values;
  }

  // The outputs of the stage's layers that later stages read.
  std::map<int, torch::Tensor> sentOutputs(const schedule::Program& p, int s,
                                           const std::map<std::string, torch::Tensor>& values) const {
    std::map<int, torch::Tensor> out;
    for (int t : p.stage_succs[s])
      for (int l : edges.at({s, t}).layers) out[l] = values.at(model.layers[l].name);
    return out;
  }

  const torch::Tensor& modelOutput(const std::map<std::string, torch::Tensor>& values) const {
    return values.at(model.layers.back().name);
  }

  void forward(const schedule::Program& p, const Action& a, const schedule::PositionFacts& at,
               const MicrobatchData& data) {
    const int s = a.stage, j = a.microbatch;
    Activation act;
    std::map<std::string, torch::Tensor> values = takeInputs(p, a, at, data, true, &act.inputs);
    const torch::Tensor labels = p.isLastStage(s) ? toDevice(data.labels(j), s) : torch::Tensor();
    AutocastScope autocast(precision, state.at(s).device);
    const bool recompute = stages[s].recompute;
    const auto part = part_recomputed.find(s);
    const bool partly = part != part_recomputed.end();
    if (recompute) act.replay.emplace(state.at(s).device, values, labels);
    withWeights(a, [&] {
      if (partly) {
        values = forwardKeeping(model, part->second, std::move(values), act.kept);
        return;
      }
      std::optional<torch::NoGradGuard> no_graph;  // a recomputing stage builds it again before B
      if (recompute) no_graph.emplace();
      values = models::forwardLayers(model, stages[s].layers, std::move(values));
    });
    if (facts.split_stages.count(s) && (!recompute || partly))
      for (int l : partly ? part->second.rest : stages[s].layers)
        act.layer_outputs.push_back(values.at(model.layers[l].name));
    act.outputs = sentOutputs(p, s, values);
    if (p.isLastStage(s)) {
      torch::Tensor loss = models::lossOf(model, modelOutput(values), labels);
      // Summed where it was computed: reading it here would wait for the device.
      auto& [sum, count] = minibatch_loss[j / p.microbatches];
      sum = sum.defined() ? sum + loss.detach() : loss.detach();
      ++count;
      act.loss = loss * facts.steps.loss_scale[j];
    }
    live[{s, j}] = std::move(act);
  }

  void evalForward(const schedule::Program& p, const Action& a, const schedule::PositionFacts& at,
                   const MicrobatchData& data, EvalResult& result) {
    const int s = a.stage, j = a.microbatch;
    AutocastScope autocast(precision, state.at(s).device);
    const auto values = models::forwardLayers(model, stages[s].layers, takeInputs(p, a, at, data, false, nullptr));
    if (!p.isLastStage(s)) {
      Activation act;
      act.outputs = sentOutputs(p, s, values);
      act.consumers_left = static_cast<int>(p.stage_succs[s].size());
      live[{s, j}] = std::move(act);
      return;
    }
    const torch::Tensor& y = modelOutput(values);
    const int64_t valid = data.valid_samples ? data.valid_samples(j) : y.size(0);
    if (valid <= 0) return;
    const torch::Tensor out = y.narrow(0, 0, valid), labels = toDevice(data.labels(j).narrow(0, 0, valid), s);
    result.loss_sum += models::lossOf(model, out, labels).item<double>() * labels.numel();
    result.correct += models::correctPredictions(model, out, labels);
    result.positions += labels.numel();
  }

  // A stage recomputing every layer, before B or I: its forward pass again (forwardAgain),
  // and from there what the backward pass starts from.
  void recomputeForward(const Action& a) {
    const int s = a.stage, j = a.microbatch;
    Activation& act = live.at({s, j});
    const torch::Tensor labels = act.replay->labels();
    const std::map<std::string, torch::Tensor> values = forwardAgain(a, stages[s].layers);
    if (facts.split_stages.count(s))
      for (int l : stages[s].layers) act.layer_outputs.push_back(values.at(model.layers[l].name));
    act.outputs = sentOutputs(*program, s, values);
    if (program->isLastStage(s))
      act.loss = models::lossOf(model, modelOutput(values), labels) * facts.steps.loss_scale[j];
  }

  // `layers` of a recomputing stage again, now building the graph, from the stage's
  // inputs at F, on the weights F read (stashed where a step came between) and its random
  // stream (ForwardReplay). Their outputs, with the inputs.
  std::map<std::string, torch::Tensor> forwardAgain(const Action& a, const std::vector<int>& layers) {
    const int s = a.stage, j = a.microbatch;
    Activation& act = live.at({s, j});
    const ForwardReplay replay = std::move(*act.replay);
    act.replay.reset();
    StageState& st = state.at(s);
    AutocastScope autocast(precision, st.device);
    std::map<std::string, torch::Tensor> values;
    auto what = [&] { return "rank " + std::to_string(rank) + ": recomputing " + schedule::toString(a); };
    withVersion(st, facts.forward_version.at({s, j}), 0, what, [&] {
      replay.run(recomputed_buffers.at(s), [&] { values = models::forwardLayers(model, layers, replay.inputs()); });
    });
    return values;
  }

  // What the backward pass starts from: the scaled loss on the last stage; elsewhere the
  // outputs later stages read, each with the sum of the gradients its consumers sent.
  std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> backwardRoots(const Action& a,
                                                                                const schedule::PositionFacts& at) {
    const int s = a.stage, j = a.microbatch;
    Activation& act = live.at({s, j});
    if (program->isLastStage(s)) return {{act.loss}, {torch::ones_like(act.loss)}};
    std::map<int, torch::Tensor> grads;  // per output layer
    for (std::size_t k = 0; k < program->stage_succs[s].size(); ++k) {
      const int t = program->stage_succs[s][k];
      const Edge& edge = edges.at({s, t});
      torch::Tensor message;
      if (at.input_slots[k] < 0) {
        Activation& consumer = live.at({t, j});
        message = consumer.input_grads.at(s);
        consumer.input_grads.erase(s);
        finishIfDone(t, j);
      } else {
        message = takeMail(at.input_slots[k]);
      }
      const std::vector<torch::Tensor> parts = edge.unpack(message);
      for (std::size_t k = 0; k < parts.size(); ++k) {
        auto [it, fresh] = grads.emplace(edge.layers[k], parts[k]);
        if (!fresh) it->second = it->second + parts[k];
      }
    }
    std::vector<torch::Tensor> roots, root_grads;
    for (const auto& [l, g] : grads) {
      roots.push_back(act.outputs.at(l));
      root_grads.push_back(g);
    }
    return {roots, root_grads};
  }

  // Stage s's input gradients (in the order of act.inputs' leaves), packed per producer
  // stage as its message. An input no path used gets zeros.
  void packInputGrads(int s, Activation& act, const std::vector<torch::Tensor>& grads) {
    std::size_t k = 0;
    for (const auto& [q, leaves] : act.inputs) {
      std::vector<torch::Tensor> part;
      for (const torch::Tensor& leaf : leaves) {
        part.push_back(grads[k].defined() ? grads[k] : torch::zeros_like(leaf));
        ++k;
      }
      act.input_grads[q] = edges.at({q, s}).pack(part);
    }
  }

  void backward(const Action& a, const schedule::PositionFacts& at) {
    const int s = a.stage;
    const auto part = part_recomputed.find(s);
    if (part == part_recomputed.end() && live.at({s, a.microbatch}).replay) recomputeForward(a);
    auto [roots, root_grads] = backwardRoots(a, at);
    Activation& act = live.at({s, a.microbatch});
    std::vector<torch::Tensor> leaves;
    for (const auto& [q, tensors] : act.inputs) leaves.insert(leaves.end(), tensors.begin(), tensors.end());
    if (part != part_recomputed.end()) {
      packInputGrads(s, act, backwardInTwo(a, part->second, roots, root_grads, leaves));
      act.weights_pending = a.type == ActionType::I;
    } else withWeights(a, [&] {
      if (a.type == ActionType::B) {
        torch::autograd::backward(roots, root_grads);
        std::vector<torch::Tensor> grads;
        for (const auto& leaf : leaves) grads.push_back(leaf.grad());
        packInputGrads(s, act, grads);
        return;
      }
      // I: the inputs' and layer outputs' gradients, keeping what W starts from
      // (NOTE(split-backward)); the graph stays for W.
      std::vector<torch::Tensor> targets = std::move(act.layer_outputs);
      targets.insert(targets.end(), leaves.begin(), leaves.end());
      const std::size_t layers = targets.size() - leaves.size();
      const std::vector<torch::Tensor> grads = act.split.inputPass(roots, root_grads, targets, state.at(s).params);
      packInputGrads(s, act, std::vector<torch::Tensor>(grads.begin() + layers, grads.end()));
      act.weights_pending = true;
    });
    if (!act.weights_pending) {  // B: the graph is spent
      act.outputs.clear();
      act.loss.reset();
      act.inputs.clear();
    }
    finishIfDone(s, a.microbatch);
  }

  // B or I of a stage recomputing its first layers (PartRecomputed), in two engine calls:
  // the rest of the stage from its roots down to the kept outputs, then the first layers,
  // run again, from those outputs with the gradients that reached them. The stage's
  // inputs collect from both; the gradients of `leaves` (its inputs) are returned.
  std::vector<torch::Tensor> backwardInTwo(const Action& a, const PartRecomputed& part,
                                           const std::vector<torch::Tensor>& roots,
                                           const std::vector<torch::Tensor>& root_grads,
                                           const std::vector<torch::Tensor>& leaves) {
    Activation& act = live.at({a.stage, a.microbatch});
    const bool split = a.type == ActionType::I;
    std::map<int, torch::Tensor> kept_grads;  // by layer
    auto add = [&](int l, const torch::Tensor& g) {
      if (!g.defined()) return;
      auto [it, fresh] = kept_grads.emplace(l, g);
      if (!fresh) it->second = it->second + g;
    };
    // A kept output sent to a later stage is a root: its gradient seeds the second call.
    std::vector<torch::Tensor> rest_roots, rest_grads, kept_leaves;
    for (std::size_t i = 0; i < roots.size(); ++i) {
      const auto k = std::find_if(act.kept.begin(), act.kept.end(), [&](const auto& p) { return p.second.is_same(roots[i]); });
      if (k != act.kept.end()) {
        add(k->first, root_grads[i]);
      } else {
        rest_roots.push_back(roots[i]);
        rest_grads.push_back(root_grads[i]);
      }
    }
    for (const auto& [l, leaf] : act.kept) kept_leaves.push_back(leaf);
    std::vector<torch::Tensor> input_grads(leaves.size());
    withWeights(a, [&] {
      if (rest_roots.empty()) return;
      if (!split) {
        torch::autograd::backward(rest_roots, rest_grads);
        for (std::size_t k = 0; k < kept_leaves.size(); ++k) add(act.kept[k].first, kept_leaves[k].grad());
        return;
      }
      std::vector<torch::Tensor> targets = std::move(act.layer_outputs);
      const std::size_t first = targets.size();
      targets.insert(targets.end(), kept_leaves.begin(), kept_leaves.end());
      targets.insert(targets.end(), leaves.begin(), leaves.end());
      const std::vector<torch::Tensor> g = act.split.inputPass(rest_roots, rest_grads, targets, state.at(a.stage).params);
      for (std::size_t k = 0; k < kept_leaves.size(); ++k) add(act.kept[k].first, g[first + k]);
      for (std::size_t i = 0; i < leaves.size(); ++i) input_grads[i] = g[first + kept_leaves.size() + i];
    });
    act.kept.clear();
    const std::map<std::string, torch::Tensor> again = forwardAgain(a, part.layers);
    std::vector<torch::Tensor> again_roots, again_grads;
    for (const auto& [l, g] : kept_grads) {
      again_roots.push_back(again.at(model.layers[l].name));
      again_grads.push_back(g);
    }
    withWeights(a, [&] {
      if (!split) {  // .grad of the inputs now holds both calls' sums
        if (!again_roots.empty()) torch::autograd::backward(again_roots, again_grads);
        for (std::size_t i = 0; i < leaves.size(); ++i) input_grads[i] = leaves[i].grad();
        return;
      }
      if (again_roots.empty()) return;
      std::vector<torch::Tensor> targets;  // W of the recomputed layers starts from their outputs
      for (int l : part.layers) targets.push_back(again.at(model.layers[l].name));
      const std::size_t first = targets.size();
      targets.insert(targets.end(), leaves.begin(), leaves.end());
      const std::vector<torch::Tensor> g =
          act.recomputed_split.inputPass(again_roots, again_grads, targets, state.at(a.stage).params);
      for (std::size_t i = 0; i < leaves.size(); ++i) {
        const torch::Tensor& more = g[first + i];
        if (more.defined()) input_grads[i] = input_grads[i].defined() ? input_grads[i] + more : more;
      }
    });
    return input_grads;
  }

  // W: the parameters' gradients from what I kept.
  void weightBackward(const Action& a) {
    Activation& act = live.at({a.stage, a.microbatch});
    withWeights(a, [&] {
      act.split.weightPass();
      act.recomputed_split.weightPass();
    });
    act.outputs.clear();
    act.loss.reset();
    act.inputs.clear();
    act.weights_pending = false;
    finishIfDone(a.stage, a.microbatch);
  }

  // Drops a micro-batch's activation once its W has run and every gradient message it
  // owes a producer stage has gone.
  void finishIfDone(int s, int j) {
    const Activation& act = live.at({s, j});
    if (!act.weights_pending && act.input_grads.empty() && !act.loss.defined() && act.outputs.empty()) live.erase({s, j});
  }

  void send(const Action& a, int position, const schedule::MessageFacts& m, bool training) {
    const int s = a.stage, j = a.microbatch;
    Activation& act = live.at({s, j});
    torch::Tensor payload;
    if (a.type == ActionType::SEND_B) {
      payload = act.input_grads.at(a.peer_stage);
      act.input_grads.erase(a.peer_stage);
      finishIfDone(s, j);
    } else {
      const Edge& edge = edges.at({s, a.peer_stage});
      std::vector<torch::Tensor> tensors;
      for (int l : edge.layers) tensors.push_back(act.outputs.at(l).detach());
      payload = edge.pack(tensors);
      if (!training && --act.consumers_left == 0) live.erase({s, j});
    }
    auto op = channel.send(payload, m.peer, m.tag);
    sends[position] = InFlight{payload, std::move(op)};
    max_sends_held = std::max(max_sends_held, static_cast<int>(sends.size()));
  }

  // These sends have certainly been delivered (NOTE(send-release) in schedule/rank_facts.cpp).
  void releaseDeliveredSends(const schedule::PositionFacts& at) {
    for (int position : at.sends_delivered) {
      auto send = sends.find(position);
      if (send == sends.end()) continue;
      send->second.op->wait();
      sends.erase(send);
    }
  }

  // The buckets of the pass that completed the gradients are mostly reduced already.
  void allReduce(int s) { state.at(s).buckets->finish(); }

  // Before the backward pass that completes a replicated stage's gradients: reduce each
  // bucket as soon as that pass has finished it.
  void armBuckets(const schedule::PositionFacts& at) {
    if (at.completes_gradients_of >= 0) state.at(at.completes_gradients_of).buckets->arm();
  }

  // The stage's next version (stage_state.h), with this rank's scale for its gradients,
  // the warm-up's rate and, under PipeMare, T1's factor on it and T2's decay for the
  // stage's delay.
  void step(const Action& a, const schedule::PositionFacts& at) {
    const int s = a.stage;
    StageState& st = state.at(s);
    StepOptions o;
    o.stash_old = at.stash_at_step;
    o.gradient_factor = facts.steps.gradient_factor[s].at(a.version);
    if (tied)
      tied->beforeStep(s, a.version, [&](int stage, int v) { return facts.steps.gradient_factor[stage].at(v); });
    const bool t1 = latest && corrections.lr_warmup;
    o.lr = stepRate(st.base_lr, st.steps_taken, lr_warmup_steps, t1 ? facts.stage_delays[s] : 0, corrections.warmup_steps);
    if (latest && corrections.discrepancy) o.t2_decay = schedule::correctionDecay(corrections.decay, facts.stage_delays[s]);
    stepStage(st, a.version, o);
  }

  // Runs `p` (the training Program, or a forward-only one when `eval` is given).
  RunResult execute(const schedule::Program& p, const MicrobatchData& data, Clock::time_point origin,
                    const std::function<void(int, double)>& on_minibatch, EvalResult* eval) {
    const auto& actions = p.ranks[rank];
    const schedule::RankFacts& f = eval ? eval_facts : facts;  // of `p`
    mailbox.clear();
    mailbox.resize(f.slots);
    for (auto& [s, st] : state) {
      st.version = 0;  // the Program's version 0 is the weights as they are now
      if (!st.stash.empty()) throw Error("internal: stashed versions left from the last run");
    }
    RunResult result;
    auto seconds = [origin](Clock::time_point t) { return std::chrono::duration<double>(t - origin).count(); };
    ActionTimer timer(model.device, origin);
    int posted = 0;
    std::optional<MinibatchLoss> unreported;
    for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
      for (; posted < static_cast<int>(actions.size()) && posted <= i + kReceiveLookahead; ++posted) {
        const Action& ahead = actions[posted];
        if (ahead.type == ActionType::RECV_F || ahead.type == ActionType::RECV_B) postReceive(ahead, *f.positions[posted].message);
      }
      const Action& a = actions[i];
      const schedule::PositionFacts& at = f.positions[i];
      const auto start = Clock::now();
      const bool compute = !eval && a.type != ActionType::RECV_F && a.type != ActionType::RECV_B &&
                           a.type != ActionType::SEND_F && a.type != ActionType::SEND_B;
      if (compute) timer.start();  // waiting and sending are not actions of the timeline
      switch (a.type) {
        case ActionType::RECV_F:
        case ActionType::RECV_B:
          awaitReceived(a, *at.message);
          result.wait_seconds += seconds(Clock::now()) - seconds(start);
          releaseDeliveredSends(at);
          break;
        case ActionType::SEND_F:
        case ActionType::SEND_B:
          send(a, i, *at.message, eval == nullptr);
          break;
        case ActionType::F:
          if (eval) evalForward(p, a, at, data, *eval);
          else forward(p, a, at, data);
          break;
        case ActionType::B:
        case ActionType::I:
          armBuckets(at);
          backward(a, at);
          break;
        case ActionType::W:
          armBuckets(at);
          weightBackward(a);
          break;
        case ActionType::ALLREDUCE: allReduce(a.stage); break;
        case ActionType::STEP: step(a, at); break;
        default: break;
      }
      if (eval) continue;
      // A stashed version is dropped once nothing later reads it (the accounting's rule).
      for (const auto& [stage, version] : at.retire) state.at(stage).stash.erase(version);
      if (compute) timer.stop(a);
      if (at.minibatch_done >= 0) {
        // Reported one mini-batch late: reading a loss waits for the device to compute it,
        // and by then the next mini-batch's work is queued, so a GPU never idles while the
        // host catches up.
        if (unreported && on_minibatch) on_minibatch(unreported->minibatch(), unreported->mean());
        unreported = minibatchLoss(p, at.minibatch_done);
      }
    }
    if (unreported && on_minibatch) on_minibatch(unreported->minibatch(), unreported->mean());
    timer.finish(result.actions, result.action_cpu_seconds);
    const auto flush = Clock::now();
    for (auto& [position, s] : sends) s.op->wait();
    sends.clear();
    result.max_sends_held = max_sends_held;
    max_sends_held = 0;
    result.wait_seconds += seconds(Clock::now()) - seconds(flush);
    const auto unused = std::count_if(mailbox.begin(), mailbox.end(), [](const Mail& m) { return m.buffer.defined(); });
    if (!live.empty() || unused > 0)
      throw Error("rank " + std::to_string(rank) + ": the schedule left " + std::to_string(live.size()) +
                  " activations and " + std::to_string(unused) + " messages unused");
    return result;
  }
};

bool readsModelInput(const models::Model& model, const StageLayers& stage) {
  for (int l : stage.layers)
    for (const std::string& input : models::layerInputs(model, l))
      if (input == models::kModelInput) return true;
  return false;
}

PipelineExecutor::PipelineExecutor(const schedule::Program& program, int rank, models::Model& model,
                                   std::vector<StageLayers> stages, int64_t microbatch_size, DataChannel& channel,
                                   const OptimizerFactory& make_optimizer, const LatestWeightCorrections& corrections,
                                   Precision precision, int64_t lr_warmup_steps)
    : impl_(std::make_unique<Impl>(program, rank, model, std::move(stages), channel, corrections, precision,
                                   lr_warmup_steps)) {
  Impl& m = *impl_;
  if (static_cast<int>(m.stages.size()) != program.num_stages)
    throw Error("the plan has " + std::to_string(m.stages.size()) + " stages, the schedule " +
                std::to_string(program.num_stages));
  StageEdges edges = stageEdges(model, m.stages, program, microbatch_size, precision);
  m.edges = std::move(edges.edges);
  output_bytes_ = std::move(edges.output_bytes);
  for (int s = 0; s < program.num_stages; ++s) m.reads_input.push_back(readsModelInput(model, m.stages[s]));
  my_stages_ = program.stagesOfRank(rank);
  m.facts = schedule::rankFacts(*m.program, m.rank);
  channel.preparePeers(m.facts.peers);
  for (int s : my_stages_) {
    const std::vector<int>& layers = m.stages[s].layers;
    const int recomputed = m.stages[s].recompute ? m.stages[s].recompute_layers : 0;
    if (recomputed > 0 && recomputed < static_cast<int>(layers.size())) {
      std::vector<int> sent;
      for (int t : program.stage_succs[s])
        for (int l : m.edges.at({s, t}).layers) sent.push_back(l);
      m.part_recomputed[s] = partRecomputed(model, layers, recomputed, sent);
    }
    if (m.stages[s].recompute) {
      std::vector<torch::Tensor>& buffers = m.recomputed_buffers[s];
      const auto again = m.part_recomputed.count(s) ? m.part_recomputed.at(s).layers : layers;
      for (int l : again)
        for (const torch::Tensor& b : model.layers[l].module.ptr()->buffers()) buffers.push_back(b);
    }
    StageState& st = m.state.emplace(s, StageState{model.device}).first->second;
    st.params = model.parameters(m.stages[s].layers);
    for (const auto& p : st.params) st.aliases.push_back(p.data().set_requires_grad(true));
    st.optimizer = make_optimizer(st.aliases);
    st.base_lr = st.optimizer->param_groups().empty() ? 0.0 : st.optimizer->param_groups()[0].options().get_lr();
    if (program.stage_ranks[s].size() > 1)
      st.buckets =
          std::make_unique<GradientBuckets>(st.params, program.stage_ranks[s], channel, sim::kGradientBucketBytes);
  }
  if (!model.tied.empty()) m.tied = std::make_unique<TiedGradients>(model, m.stages, program, rank, channel);
}

PipelineExecutor::~PipelineExecutor() = default;

RunResult PipelineExecutor::run(const schedule::Program& program, const MicrobatchData& data,
                                Clock::time_point origin, const std::function<void(int, double)>& on_minibatch) {
  Impl& m = *impl_;
  if (&program != m.program) {
    if (program.num_stages != m.program->num_stages || program.stage_ranks != m.program->stage_ranks ||
        program.microbatches != m.program->microbatches)
      throw Error("internal: a Program of another layout than the executor's");
    m.program = &program;
    m.facts = schedule::rankFacts(*m.program, m.rank);
  }
  return m.execute(program, data, origin, on_minibatch, nullptr);
}

EvalResult PipelineExecutor::evaluate(const schedule::Program& forward_only, const MicrobatchData& data) {
  torch::NoGradGuard no_grad;
  EvalResult result;
  impl_->eval_facts = schedule::messageFacts(forward_only, impl_->rank);
  impl_->execute(forward_only, data, Clock::now(), {}, &result);
  return result;
}

void PipelineExecutor::setWeightProbe(WeightProbe probe) { impl_->probe = std::move(probe); }

std::vector<torch::Tensor> PipelineExecutor::parameters() const {
  std::vector<torch::Tensor> out;
  for (int s : my_stages_) out.insert(out.end(), impl_->state.at(s).params.begin(), impl_->state.at(s).params.end());
  return out;
}

std::vector<StageWeights> PipelineExecutor::weights() const {
  std::vector<StageWeights> out;
  for (int s : my_stages_) {
    StageWeights w;
    w.stage = s;
    const StageState& st = impl_->state.at(s);
    w.peak_versions = st.peak_versions;
    w.extra_buffers = static_cast<int>(!st.velocity.empty()) + static_cast<int>(!st.corrected.empty());
    for (const auto& p : st.params) w.param_bytes += p.numel() * p.element_size();
    out.push_back(w);
  }
  return out;
}

std::vector<PipelineExecutor::TensorMap> PipelineExecutor::parameterState(int s) const {
  return parameterStateOf(impl_->state.at(s));
}

void PipelineExecutor::loadParameterState(int s, const std::vector<TensorMap>& state) {
  runtime::loadParameterState(impl_->state.at(s), s, state);
}

int64_t PipelineExecutor::stepsTaken(int s) const { return impl_->state.at(s).steps_taken; }
void PipelineExecutor::setStepsTaken(int s, int64_t steps) { impl_->state.at(s).steps_taken = steps; }

}  // namespace pipetrain::runtime
