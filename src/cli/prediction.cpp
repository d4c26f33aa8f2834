#include "prediction.h"

#include <limits>
#include <map>

#include "pipetrain/util/error.h"

namespace pipetrain::cli {
namespace {

// Gloo over loopback on these machines. Point to point it moves 3-5 GB/s with ~20-50 us
// latency (docs/profiling.md), but its all-reduce of a 32 MiB stage took 56 ms (0.6 GB/s
// of ring traffic): it sums on the cores that also train. The links are priced at the
// all-reduce rate, the one that decides between replicas and stages; activations
// (KiB to a few MiB per micro-batch) are then overpriced by milliseconds at most.
constexpr double kLoopbackBandwidth = 0.6e9;
constexpr double kLoopbackLatency = 50e-6;

}  // namespace

cluster::ClusterSpec localCluster(int ranks, int64_t memory_bytes) {
  return cluster::ClusterSpec::uniform(ranks, memory_bytes, kLoopbackBandwidth, kLoopbackLatency);
}

sim::Report predictRun(const MeasuredRun& run) {
  const int ranks = run.timeline->numRanks();
  const int stages = static_cast<int>(run.stage_output_bytes.size());
  // Mean measured seconds per (stage, action type).
  std::map<std::pair<int, schedule::ActionType>, std::pair<double, int>> sums;
  for (const auto& rank : run.timeline->ranks)
    for (const auto& a : rank) {
      auto& [total, count] = sums[{a.action.stage, a.action.type}];
      total += a.end - a.start;
      ++count;
    }
  auto mean = [&](int s, schedule::ActionType t) {
    auto it = sums.find({s, t});
    return it == sums.end() ? 0.0 : it->second.first / it->second.second;
  };
  std::vector<graph::Layer> layers;
  for (int s = 0; s < stages; ++s) {
    graph::Layer l;
    l.name = "stage" + std::to_string(s);
    l.kind = "stage";
    if (s > 0) l.inputs = {"stage" + std::to_string(s - 1)};
    l.forward_seconds = mean(s, schedule::ActionType::F);
    const double split_i = mean(s, schedule::ActionType::I), split_w = mean(s, schedule::ActionType::W);
    l.backward_input_seconds = split_i + split_w > 0 ? split_i : mean(s, schedule::ActionType::B);
    l.backward_weight_seconds = split_w;
    l.optimizer_seconds = mean(s, schedule::ActionType::STEP);
    l.output_bytes = l.saved_activation_bytes = run.stage_output_bytes[s];
    if (s < static_cast<int>(run.stage_param_bytes.size())) l.param_bytes = run.stage_param_bytes[s];
    layers.push_back(l);
  }
  const graph::LayerGraph graph(layers, run.microbatch_size, "measured run");
  const cluster::ClusterSpec cluster =
      localCluster(ranks, std::numeric_limits<int64_t>::max());
  plan::Plan plan;
  plan.microbatch_size = run.microbatch_size;
  plan.microbatches = run.microbatches;
  plan.schedule.name = run.schedule;
  plan.schedule.chunks = run.chunks;
  for (int s = 0, next = 0; s < stages; ++s) {
    plan::Stage stage{{layers[s].name}, {}};
    const int replicas = run.stage_replicas.empty() ? 1 : run.stage_replicas[s];
    for (int k = 0; k < replicas; ++k) stage.devices.push_back(cluster.device(next++ % ranks).name);
    plan.stages.push_back(std::move(stage));
  }
  return sim::evaluatePlan(graph, cluster, plan).report;
}

}  // namespace pipetrain::cli
