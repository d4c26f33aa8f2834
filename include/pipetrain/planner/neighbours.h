// Plans one step away from a chain plan, for the exploration's simulation-guided
// refinement (explore.h): the DP's objective (the slowest stage or transfer) does not
// see what the simulator does (a 1F1B loop stalled by a transfer below the stage's
// compute, the fill of a pipeline whose stages are unevenly replicated), so the
// exploration walks from its best chain plan to better simulated neighbours.
//
// A chain plan's stages hold consecutive runs of the layers (topological order) on
// consecutive blocks of devices (cluster order), stage after stage. Its neighbours:
//  - a boundary between two stages moved by 1, 2, 4, ... layers either way;
//  - an inner stage's two boundaries moved together (its layers shifted whole) so;
//  - an inner stage grown or shrunk at both ends, by 1 or 2 layers at each;
//  - a boundary between two stages' device blocks moved by 1, 2, 4, ... devices either way;
//  - the last stage given the next 1, 2, 4, ... idle devices, or as many given back;
//  - two adjacent stages merged on both their devices;
//  - a replicated stage split in two at any layer, each half on half its devices;
//  - the last stage's tail layers made a new stage on the next idle devices (one, or as
//    many as the last stage has).
// A neighbour's replica counts must split the micro-batches (schedule::replicasCanSplit)
// and stay within `max_replicas` (0 = any; 1 where the schedule does not replicate).
// Unlike the DP, a neighbour's replicas may straddle part of a node (PipeDream's
// optimizer allows such layouts; the simulator judges them).
#pragma once

#include <optional>
#include <vector>

#include "pipetrain/cluster/cluster_spec.h"
#include "pipetrain/graph/layer_graph.h"
#include "pipetrain/plan/plan.h"

namespace pipetrain::planner {

// A chain plan's stages as runs: stage s holds layers [layer[s], layer[s + 1]) (graph
// order) on devices [device[s], device[s + 1]) (cluster order).
struct ChainRuns {
  std::vector<int> layer, device;
  int numStages() const { return static_cast<int>(layer.size()) - 1; }
};

// The runs of `plan`, or nothing when it is not a chain plan as above (a stage graph,
// stages on scattered devices, several stages per rank).
std::optional<ChainRuns> chainRuns(const plan::Plan& plan, const graph::LayerGraph& graph,
                                   const cluster::ClusterSpec& cluster);

// What a chain's cuts cost, for the moves that carry a stage boundary to a cheaper cut:
// crossing[k], the output bytes of the layers before layer k that layer k or a later one
// reads (crossingBytes), and work[k], the compute of layers [0, k) at the plan's
// micro-batch (any unit: only differences are compared). Both indexed 0 .. layers, and
// held by reference: the planner keeps both for the whole search.
struct ChainCuts {
  const std::vector<double>& crossing;
  const std::vector<double>& work;
};
std::vector<double> crossingBytes(const graph::LayerGraph& graph);

// The neighbours of `plan`, whose runs are `runs`, as runs: cheap to price before any is
// made a plan (a thousand layers' chain has about a thousand neighbours, each naming
// every layer and device as a plan).
std::vector<ChainRuns> neighbourRuns(const plan::Plan& plan, const ChainRuns& runs,
                                     const cluster::ClusterSpec& cluster, int max_replicas = 0);
// More of them: each boundary carried to the nearest cut either way that fewer bytes
// cross, alone or with the boundary before or after it moved the same way by as much
// work (the stage between keeps its work). A few may be among neighbourRuns' too.
std::vector<ChainRuns> cheaperCutRuns(const plan::Plan& plan, const ChainRuns& runs,
                                      const cluster::ClusterSpec& cluster, const ChainCuts& cuts, int max_replicas = 0);

// `like` (schedule and micro-batching) with the stages of `runs`, named. `like`'s own
// stages are copied before they are replaced: pass a plan without them.
plan::Plan planOfRuns(const plan::Plan& like, const ChainRuns& runs, const graph::LayerGraph& graph,
                      const cluster::ClusterSpec& cluster);

// A multi-stage schedule's plan (interleaved, zb-v, dualpipev: several stages per device,
// each stage on one device, placed by the schedule) whose stages hold consecutive layers
// in graph order: its stages' first layers and the end, or nothing for any other plan.
std::optional<std::vector<int>> multiStageBounds(const plan::Plan& plan, const graph::LayerGraph& graph);

// Its neighbours, the devices staying where the placement puts them: every other split of
// the layers into as many stages where there are at most kEverySplitUpTo splits, else one
// stage boundary moved by one or two layers either way, or two adjacent ones by one (a
// stage moved whole), every stage keeping a layer. The exploration's first such plan
// splits compute evenly (combinations.cpp), blind to the optimizer steps and the
// transfers the simulator prices. Moves between two stages of one device change no
// device's compute, so a walk of such moves stalls on plateaus: on random 7-9 layer
// chains on 2 devices it reached the best split in 16 of 24 cases, where trying every
// split (pruned by the compute bound) reaches it in all (explore_test.cpp).
inline constexpr std::size_t kEverySplitUpTo = 512;
// How many ways `layers` layers split into `stages` non-empty runs: C(layers - 1, stages - 1).
double splitCount(int layers, int stages);
// Every such split as its bounds (0, ..., layers), or none when there are more than `limit`.
std::vector<std::vector<int>> everySplit(int layers, int stages, std::size_t limit);
std::vector<plan::Plan> multiStageNeighbours(const plan::Plan& plan, const std::vector<int>& bounds,
                                             const graph::LayerGraph& graph);

// The neighbours of `plan` as plans, or none when it is not a chain plan.
std::vector<plan::Plan> chainNeighbours(const plan::Plan& plan, const graph::LayerGraph& graph,
                                        const cluster::ClusterSpec& cluster, int max_replicas = 0);

}  // namespace pipetrain::planner
