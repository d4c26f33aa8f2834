#include "pipetrain/sim/cost_model.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <vector>

#include "pipetrain/plan/plan_program.h"

namespace pipetrain::sim {

double ringAllreduceSeconds(double bytes, int n, double bandwidth, double latency) {
  if (n < 2) return 0;
  const double steps = 2.0 * (n - 1);
  return steps * latency + steps / n * bytes / bandwidth;
}

double ringAllreduceHostSeconds(double bytes, int n, double host_bandwidth) {
  return n < 2 ? 0 : 2.0 * (n - 1) / n * bytes / host_bandwidth;  // bytes / inf = 0: no host cost
}

double transferSeconds(double bytes, const cluster::Route& route) {
  return bytes / route.bandwidth + route.latency;  // bytes / inf = 0 on the same device
}

namespace {

// The integral of x n phi(x) Phi(x)^(n-1) over [-8, 8] by Simpson's rule: beyond it the
// integrand is below 1e-12 for any n a cluster has.
double integrateMaxOfNormals(int n) {
  constexpr int kSteps = 320;
  constexpr double kFrom = -8, kTo = 8, kStep = (kTo - kFrom) / kSteps;
  double sum = 0;
  for (int i = 0; i <= kSteps; ++i) {
    const double x = kFrom + i * kStep;
    const double density = std::exp(-x * x / 2) / std::sqrt(2 * M_PI);
    const double below = 0.5 * std::erfc(-x / std::sqrt(2.0));
    sum += x * n * density * std::pow(below, n - 1) * (i == 0 || i == kSteps ? 1 : i % 2 ? 4 : 2);
  }
  return sum * kStep / 3;
}

}  // namespace

double expectedMaxOfNormals(int n) {
  if (n < 2) return 0;
  // Integrated once per n up to kTabled (the planner builds cost models by the thousand).
  constexpr int kTabled = 256;
  static const std::vector<double> table = [] {
    std::vector<double> t(kTabled + 1, 0.0);
    for (int k = 2; k <= kTabled; ++k) t[k] = integrateMaxOfNormals(k);
    return t;
  }();
  return n <= kTabled ? table[n] : integrateMaxOfNormals(n);
}

double firstBucketShare(double param_bytes) {
  return param_bytes > kGradientBucketBytes ? kGradientBucketBytes / param_bytes : 1.0;
}

CostModel::CostModel(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster, const plan::Plan& plan)
    : graph_(graph), cluster_(cluster), plan_(plan) {
  // Bytes scale with the micro-batch; compute times come from the graph (secondsAt).
  const double scale = static_cast<double>(plan.microbatch_size) / graph.batchSize();
  const plan::StageGraph sg = plan::stageGraph(plan, graph);
  dag_.preds = sg.preds;
  dag_.succs = sg.succs;
  edge_bytes_.resize(plan.numStages());
  for (int s = 0; s < plan.numStages(); ++s)
    for (int64_t b : sg.edge_bytes[s]) edge_bytes_[s].push_back(b * scale);

  for (int s = 0; s < plan.numStages(); ++s) {
    StageCosts c;
    const plan::Stage& stage = plan.stages[s];
    const int recomputed = stage.recomputedLayers();
    const bool partly = recomputed > 0 && recomputed < static_cast<int>(stage.layers.size());
    // By layer index; not made for a stage that recomputes nothing (the planner prices
    // stages by the thousand).
    const std::vector<char> in_recomputed = recomputed > 0 ? plan::recomputedLayerMask(stage, graph) : std::vector<char>();
    double recomputed_bytes = 0, kept_outputs = 0;  // of the recomputed layers, where only some are
    for (const std::string& name : stage.layers) {
      const int index = graph.indexOf(name);
      const graph::Layer& l = graph.layer(index);
      const graph::PassSeconds t = graph.secondsAt(index, plan.microbatch_size);
      if (recomputed > 0 && in_recomputed[index]) {
        // F runs it without a graph; B (or I) runs it again with one first.
        c.forward += t.forward_no_grad;
        c.recompute += t.forward;
      } else {
        c.forward += t.forward;
      }
      if (partly && in_recomputed[index]) {
        recomputed_bytes += l.savedBytesAt(scale);
        // Its output stays where a layer that is not recomputed (here or later) reads it.
        for (int next : graph.successors(index))
          if (!in_recomputed[next]) {
            kept_outputs += l.output_bytes * scale;
            break;
          }
      }
      c.backward_input += t.backward_input;
      c.backward_weight += t.backward_weight;
      c.split_weight += t.split_weight;
      c.optimizer_step += l.optimizer_seconds;  // per step, whatever the micro-batch
      c.activation_bytes += l.savedBytesAt(scale);
      c.split_activation_bytes += l.splitActivationBytes() * scale;
      c.param_bytes += l.param_bytes;
      c.optimizer_bytes += l.optimizer_state_bytes;
      // It loads the micro-batches (a layer reading only the model input) or the labels
      // (the last layer computes the loss): its ranks hold the dataset.
      c.holds_data = c.holds_data || graph.predecessors(index).empty() || index == graph.size() - 1;
    }
    // Backward passes run the stage's layers last to first. B frees each layer's saved
    // activations as it passes; I frees none, keeps what W starts from, and keeps each
    // layer output's gradient to the end of its engine call (runtime::SplitBackward's
    // targets).
    double later_saved = 0, later_kept = 0, later_gradients = 0;
    for (auto name = stage.layers.rbegin(); name != stage.layers.rend(); ++name) {
      const graph::Layer& l = graph.layer(graph.indexOf(*name));
      c.backward_peak_bytes = std::max(c.backward_peak_bytes, l.backwardTransientAt(scale) - later_saved);
      c.input_backward_peak_bytes = std::max(c.input_backward_peak_bytes, later_kept + l.inputBackwardTransientAt(scale));
      // W keeps the gradients it made for the later layers (it frees what they read, which
      // is not counted off: a bound).
      c.weight_peak_bytes = std::max(c.weight_peak_bytes, later_gradients + l.weightPassPeakAt(scale));
      later_saved += l.savedBytesAt(scale);
      later_kept += l.inputPassKeptBytesAt(scale);
      later_gradients += static_cast<double>(l.param_bytes);
    }
    c.backward_call = graph.backwardCallSeconds();
    c.versions = plan::stageVersionCosts(stage, graph);
    prices_versions_ = prices_versions_ || c.versions.priced();
    if (recomputed > 0) {
      double received = 0;  // the stage's inputs per micro-batch, which a recomputing stage keeps
      for (int q : dag_.preds[s]) received += edgeBytes(q, s);
      if (!partly) {
        // The forward pass runs twice. Between F and B a micro-batch keeps the messages
        // the stage received and sent; between I and W a split schedule still holds what
        // W reads, which the recomputed graph made again.
        c.recompute_peak_bytes = c.activation_bytes;
        c.activation_bytes = received;
        for (double b : edge_bytes_[s]) c.activation_bytes += b;
      } else {
        // Its first layers run twice: between F and B a micro-batch keeps the stage's
        // inputs, the outputs of those layers that others read, and the other layers'
        // activations.
        c.recompute_peak_bytes = recomputed_bytes;
        c.activation_bytes += received + kept_outputs - recomputed_bytes;
      }
    }
    stages_.push_back(c);
  }
  replicas_ = plan::stageReplicas(plan);
  for (const std::string& d : plan::rankDeviceNames(plan)) rank_device_.push_back(cluster.indexOf(d));
  for (int s = 0; s < plan.numStages(); ++s) allreduce_.push_back(ringAllreduceOf(s));
  ends_free_ = std::all_of(cluster.levels().begin(), cluster.levels().end(),
                           [](const cluster::Level& l) { return l.host.free() && !l.through_host; }) &&
               std::all_of(cluster.links().begin(), cluster.links().end(),
                           [](const cluster::Link& l) { return l.host.free() && !l.through_host; });
}

double CostModel::computeSeconds(const schedule::Action& a, int rank) const {
  using schedule::ActionType;
  const StageCosts& c = stages_[a.stage];
  double t = 0;
  switch (a.type) {
    case ActionType::F: t = c.forward; break;
    case ActionType::B: t = c.recompute + c.backward_input + c.backward_weight; break;
    case ActionType::I: t = c.recompute + c.backward_input; break;
    case ActionType::W: t = c.split_weight; break;
    case ActionType::STEP: t = c.optimizer_step; break;
    default: return 0;
  }
  if (schedule::isBackward(a.type)) t += c.backward_call;
  return t / cluster_.device(rank_device_[rank]).speed;
}

double CostModel::messageBytes(const schedule::Action& message) const {
  // The edge the message crosses, producer to consumer; a gradient flowing back has the
  // size of the activation that crossed it.
  using schedule::ActionType;
  const bool own_stage_produced = message.type == ActionType::SEND_F || message.type == ActionType::RECV_B;
  const int from = own_stage_produced ? message.stage : message.peer_stage;
  const int to = own_stage_produced ? message.peer_stage : message.stage;
  return edgeBytes(from, to);
}

double CostModel::edgeBytes(int from, int to) const {
  const auto& succs = dag_.succs[from];
  const auto it = std::find(succs.begin(), succs.end(), to);
  assert(it != succs.end());
  return edge_bytes_[from][it - succs.begin()];
}

double CostModel::hostSeconds(const schedule::Action& message, int rank, int peer_rank) const {
  if (ends_free_) return 0;  // most clusters: no route to find either
  const cluster::Route r = route(rank, peer_rank);  // the same both ways
  if (cluster::endsFree(r)) return 0;
  return cluster::messageEndSeconds(cluster_.device(rank_device_[rank]), r, messageBytes(message));
}

cluster::Route CostModel::route(int from_rank, int to_rank) const {
  return cluster_.route(rank_device_[from_rank], rank_device_[to_rank]);
}

CostModel::AllreduceCost CostModel::ringAllreduceOf(int stage) const {
  const int n = replicas_[stage];
  if (n < 2) return {};
  const auto& devices = plan_.stages[stage].devices;
  double bandwidth = std::numeric_limits<double>::infinity(), host_bandwidth = bandwidth, latency = 0, copy = 0;
  bool through_host = false;
  double jitter = 0;
  for (int i = 0; i < n; ++i) {
    const int device = cluster_.indexOf(devices[i]);
    jitter = std::max(jitter, cluster_.device(device).compute_jitter);
    const auto r = cluster_.route(device, cluster_.indexOf(devices[(i + 1) % n]));
    bandwidth = std::min(bandwidth, r.allreduce_bandwidth);
    host_bandwidth = std::min(host_bandwidth, r.allreduce_host_bandwidth);
    latency = std::max(latency, r.allreduceLatency());
    through_host |= r.through_host;
    copy = std::max(copy, cluster::allreduceCopySecondsPerByte(cluster_.device(device)));
  }
  const double bytes = stages_[stage].param_bytes;
  return {ringAllreduceSeconds(bytes, n, bandwidth, latency),
          ringAllreduceHostSeconds(bytes, n, host_bandwidth) + (through_host ? copy * bytes : 0),
          jitter > 0 ? jitter * expectedMaxOfNormals(n) : 0.0};
}

}  // namespace pipetrain::sim
