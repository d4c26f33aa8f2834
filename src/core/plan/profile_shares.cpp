#include "pipetrain/plan/profile_shares.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "pipetrain/plan/partition.h"
#include "pipetrain/schedule/program_memory.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/schedule/schedules.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/stats.h"

namespace pipetrain::plan {

std::vector<int> profileShares(const std::vector<int64_t>& param_bytes, int parts) {
  // A byte more per layer, so that layers without parameters still weigh something.
  std::vector<double> costs;
  for (int64_t b : param_bytes) costs.push_back(static_cast<double>(b) + 1);
  return balancedChainSplit(costs, std::min(parts, static_cast<int>(costs.size())));
}

std::vector<int> profileInFlight(const std::string& schedule, int parts, int microbatches) {
  std::vector<int> in_flight;
  for (int k = 0; k < parts; ++k)  // 1F1B's
    in_flight.push_back(std::clamp(std::min(parts - k, microbatches), 1, kMaxProfiledInFlight));
  if (schedule.empty() || schedule == "auto") return in_flight;
  schedule::ScheduleSpec spec;
  spec.name = schedule;
  spec.microbatches = microbatches;
  std::vector<schedule::RankFootprint> footprint;
  try {
    const int stages = parts * schedule::stagesPerRank(schedule::traits(schedule), 1);  // a V: two per rank
    footprint = schedule::accountMemory(schedule::generate(spec, schedule::chainDag(stages)));
  } catch (const Error&) {
    return in_flight;  // an unknown schedule, or too few micro-batches for it
  }
  for (int k = 0; k < parts && k < static_cast<int>(footprint.size()); ++k)
    in_flight[k] = std::clamp(static_cast<int>(std::ceil(footprint[k].peak_activations - 1e-9)), 1,
                              kMaxProfiledInFlight);
  return in_flight;
}

namespace {

// Whether every profile measured its core's speed (a GPU's does not).
bool allProbed(const std::vector<graph::LayerGraph>& graphs) {
  return std::all_of(graphs.begin(), graphs.end(),
                     [](const graph::LayerGraph& g) { return g.profiledAs().probe_seconds > 0; });
}

// `g` with its times as a core that took `probe_seconds` for the probe would have taken
// them (NOTE(core-probe)). REQUIRES: g was probed.
graph::LayerGraph atCoreSpeed(const graph::LayerGraph& g, double probe_seconds) {
  const double factor = probe_seconds / g.profiledAs().probe_seconds;
  std::vector<graph::Layer> layers = g.layers();
  for (graph::Layer& l : layers) l.scaleTimes(factor);
  graph::LayerGraph scaled = g.withLayers(std::move(layers), "profile at one core speed");
  scaled.setBackwardCallSeconds(g.backwardCallSeconds() * factor);
  graph::ProfiledAs how = g.profiledAs();
  how.probe_seconds = probe_seconds;
  scaled.setProfiledAs(how);
  return scaled;
}

}  // namespace

std::vector<graph::LayerGraph> sizesAtOneCoreSpeed(std::vector<graph::LayerGraph> sizes) {
  if (!allProbed(sizes)) return sizes;
  std::vector<double> probes;
  for (const graph::LayerGraph& g : sizes) probes.push_back(g.profiledAs().probe_seconds);
  const double reference = util::median(probes);
  for (graph::LayerGraph& g : sizes) g = atCoreSpeed(g, reference);
  return sizes;
}

graph::LayerGraph mergeProfileShares(const std::vector<graph::LayerGraph>& graphs) {
  if (graphs.empty()) throw Error("merging profile shares: no profiles");
  const graph::LayerGraph& first = graphs.front();
  std::vector<int64_t> param_bytes;
  for (const graph::Layer& l : first.layers()) param_bytes.push_back(l.param_bytes);
  for (std::size_t g = 1; g < graphs.size(); ++g) {
    const std::string which = "merging profile shares: profile " + std::to_string(g);
    if (graphs[g].batchSize() != first.batchSize() || graphs[g].size() != first.size())
      throw Error(which + " is of another batch size or layer count than profile 0");
    for (int l = 0; l < first.size(); ++l)
      if (graphs[g].layer(l).name != first.layer(l).name || graphs[g].layer(l).param_bytes != param_bytes[l])
        throw Error(which + ": layer " + std::to_string(l) + " is '" + graphs[g].layer(l).name + "', not '" +
                    first.layer(l).name + "' of the same size as in profile 0");
  }
  const std::vector<int> bounds = profileShares(param_bytes, static_cast<int>(graphs.size()));
  // The shares' cores at one speed, where every share measured its own
  // (torch/runtime/core_probe.h, NOTE(core-probe)): the slower core's. A synchronous step
  // goes at its slowest rank's pace, and at any moment the cores differ: in the runs of
  // bench/prediction_cases.py the slowest rank's probe took a median 1.26x the shares'
  // mean (docs/profiling.md#cores-that-run-at-different-speeds). Which core will be the
  // slow one is not known, but that one will be.
  double slowest_probe = 0;
  for (const graph::LayerGraph& g : graphs) slowest_probe = std::max(slowest_probe, g.profiledAs().probe_seconds);
  const bool probed = allProbed(graphs);
  std::vector<graph::LayerGraph> timers = graphs;
  if (probed)
    for (graph::LayerGraph& g : timers) g = atCoreSpeed(g, slowest_probe);
  std::vector<graph::Layer> layers = first.layers();
  for (std::size_t share = 0; share + 1 < bounds.size(); ++share)
    for (int l = bounds[share]; l < bounds[share + 1]; ++l) {
      const graph::Layer& timed = timers[share].layer(l);
      layers[l].forward_seconds = timed.forward_seconds;
      layers[l].backward_input_seconds = timed.backward_input_seconds;
      layers[l].backward_weight_seconds = timed.backward_weight_seconds;
      layers[l].split_weight_seconds = timed.split_weight_seconds;
      layers[l].forward_no_grad_seconds = timed.forward_no_grad_seconds;
      layers[l].optimizer_seconds = timed.optimizer_seconds;
      layers[l].weight_versions = timed.weight_versions;
      layers[l].other_batches = timed.other_batches;
    }
  graph::LayerGraph merged(std::move(layers), first.batchSize(), "profile in shares");
  // The share that loaded the data measured what holding it costs; the framework is the
  // most any share's process paged in, a rank's passes being some share's.
  graph::ProcessMemory memory = first.processMemory();
  for (const graph::LayerGraph& g : graphs) {
    memory.data_bytes = std::max(memory.data_bytes, g.processMemory().data_bytes);
    memory.framework_bytes = std::max(memory.framework_bytes, g.processMemory().framework_bytes);
  }
  merged.setProcessMemory(memory);
  // Every share timed the engine's call on its own core: their mean, at the one speed.
  double backward_call = 0;
  for (const graph::LayerGraph& g : timers)
    backward_call += g.backwardCallSeconds() / static_cast<double>(timers.size());
  merged.setBackwardCallSeconds(backward_call);
  graph::ProfiledAs how = first.profiledAs();
  how.probe_seconds = probed ? slowest_probe : 0.0;
  merged.setProfiledAs(how);
  return merged;
}

}  // namespace pipetrain::plan
