// Plan: how a model is cut into stages, where each stage runs, and how it is scheduled.
//
// Stages form a DAG (derived from the layer graph): a chain for classic pipelines, a
// graph for GraphPipe-style plans. Each stage lists the devices that run it; more
// than one device means data-parallel replicas of that stage. One device = one rank.
// A device may run several stages only under the interleaved schedule, where rank r
// holds stages r, r+p, r+2p, ... (v "chunks").
// JSON form: docs/formats.md#plan ("pipetrain.plan", version 1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/cluster/cluster_spec.h"
#include "pipetrain/graph/layer_graph.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::plan {

struct Stage {
  std::vector<std::string> layers;
  std::vector<std::string> devices;  // replicas; size() >= 1
  // Activation recomputation: the forward pass keeps only the stage's inputs and the
  // outputs it sends, and runs again before the backward pass needs the rest
  // (docs/planner.md#recomputation). Trades one more F per micro-batch for memory.
  bool recompute = false;
  // Selective recomputation: with `recompute`, only the stage's first this many layers
  // (in the model's order, which is topological) run again; the rest keep their activations, and the first
  // layers' outputs that the rest or later stages read are kept too. 0: every layer.
  int recompute_layers = 0;
  // How many of the stage's layers recompute: 0, recompute_layers, or all of them.
  int recomputedLayers() const {
    return !recompute ? 0 : recompute_layers > 0 ? recompute_layers : static_cast<int>(layers.size());
  }
};

struct ScheduleOptions {
  std::string name = "1f1b";   // see schedule::scheduleNames()
  int chunks = 1;              // interleaved: stages per rank
  bool vertical_sync = false;  // pipedream: every stage uses the input stage's version
  // PipeMare (docs/async.md): T1 scales stage i's learning rate by tau_i^-(1 - min(k/K, 1))
  // over the first K = pipemare_warmup_steps steps; T2 runs each backward pass on
  // w - tau * delta, delta the velocity averaged with decay D^(1/tau).
  bool pipemare_lr_warmup = true;      // T1
  int pipemare_warmup_steps = 200;     // K
  bool pipemare_correction = true;     // T2 (adds a velocity buffer)
  double pipemare_decay = 0.1;         // D
};

struct Plan {
  std::vector<Stage> stages;
  int64_t microbatch_size = 1;
  int microbatches = 1;        // per mini-batch
  ScheduleOptions schedule;

  static Plan fromJson(const json_io::Json& j, const std::string& origin);
  static Plan load(const std::string& path);
  json_io::Json toJson() const;

  int numStages() const { return static_cast<int>(stages.size()); }
  int64_t samplesPerMinibatch() const { return microbatch_size * microbatches; }
};

// "2x1+1x2": the stages with their replica counts, run-length encoded (tables, reports).
std::string stageShape(const Plan& plan);
// The stages that recompute their activations: "" for none, "all", or their numbers
// with runs as ranges ("1-78,80"), a stage recomputing some of its layers as "3(2/8)"
// (2 of its 8), for tables and reports.
std::string recomputedStages(const Plan& plan);
// Per layer of `graph`, whether `stage` recomputes it: its first recomputedLayers() in
// the model's order, as the runtime runs them. REQUIRES: the graph has the stage's layers.
std::vector<char> recomputedLayerMask(const Stage& stage, const graph::LayerGraph& graph);

// The stage DAG of a plan over a graph: stage s -> t when a layer of t consumes a layer
// of s. REQUIRES: validate(plan, graph, cluster) passed.
struct StageGraph {
  std::vector<std::vector<int>> preds;
  std::vector<std::vector<int>> succs;
  // bytes per sample crossing s -> t, in graph units (per graph batch); the cost
  // model scales them to a micro-batch.
  std::vector<std::vector<int64_t>> edge_bytes;  // [s][index in succs[s]]
};
StageGraph stageGraph(const Plan& plan, const graph::LayerGraph& graph);

// Rejects, with a message naming `origin`, the stage and the layer or device:
// a layer unassigned or assigned twice, an unknown layer or device, a stage that is
// not a convex subgraph, an empty stage, a device used twice (except the interleaved
// layout), a stage whose memory exceeds its device, bad micro-batch numbers.
// Memory is checked with `stage_memory_bytes` when given (per stage, from the
// simulator's accounting of the chosen schedule), else with parameters, gradients and
// optimizer state plus one micro-batch of activations.
void validate(const Plan& plan, const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
              const std::string& origin = "plan",
              const std::vector<int64_t>& stage_memory_bytes = {});

}  // namespace pipetrain::plan
