// PipeDream's partitioner: a dynamic program that cuts a chain of layers into pipeline
// stages, gives each stage a block of devices (more than one = data-parallel replicas)
// and minimises the slowest stage, on a hierarchical and possibly heterogeneous cluster.
//
// The search space. Layers are taken in topological order (a DAG is planned over that
// linearisation; any run of a topological order is a convex stage). Stages tile a
// prefix of the cluster's devices in order, so a stage's replicas sit next to each
// other: either inside one group of the innermost level, or as whole groups of level
// l-1 inside one group of level l (replicas never straddle half a node). Devices left
// over at the end stay idle.
//
// The objective, per mini-batch of m micro-batches of size b, is the largest of
//  - a stage's time: ceil(m / r) micro-batches of forward + backward and the optimizer step
//    on its slowest replica, plus the part of the replicas' ring all-reduce that outlasts the last backward
//    pass (the all-reduce overlaps it, as bucketed data parallelism does; PipeDream
//    added the two), and the host time of its messages where the cluster gives one
//    (cluster_spec.h): an activation and a gradient per micro-batch over each of its
//    cuts, as the simulator holds the ranks for them;
//  - a boundary's time: m messages of the activations crossing the cut, priced on the
//    route between the two stages' adjacent devices (always priced, also within a node).
// A stage whose replicas cannot hold its weights, gradients, optimizer state and
// in-flight activations (recomputing, where PartitionOptions::recompute allows it), or
// cannot split the m micro-batches (schedule::replicasCanSplit: shares may differ by one
// where replicas step once per mini-batch), is not a candidate.
// The prices are sim::ringAllreduceSeconds, sim::transferSeconds and the routes'
// HostCost, the simulator's.
#pragma once

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "pipetrain/cluster/cluster_spec.h"
#include "pipetrain/graph/layer_graph.h"
#include "pipetrain/plan/plan.h"
#include "pipetrain/schedule/schedule_traits.h"

namespace pipetrain::planner {

// Activation recomputation (docs/planner.md#recomputation): on no stage, on every
// stage, or on the stages that would not fit their devices' memory without it.
enum class Recompute { kNone, kFull, kAuto };
Recompute recomputeFromName(const std::string& name);  // "none", "full", "auto"; Error otherwise

struct PartitionOptions {
  std::string schedule = "1f1b";  // decides weight versions and in-flight activations
  int64_t microbatch_size = 1;
  int microbatches = 1;           // per mini-batch
  int max_devices = 0;            // plan on the first this-many devices; 0 = all
  // The pipeline runs as this many copies, one per block of max_devices devices
  // (replicated_pipeline.h), `microbatches` being one copy's: a stage's all-reduce rings
  // through its replicas in every copy, across the blocks.
  int copies = 1;
  // True: tile exactly those devices (a job whose ranks are already there); false: the
  // best plan on up to that many, which may leave devices idle.
  bool use_all_devices = false;
  int max_replicas = 0;           // per stage; 0 = as many as help, 1 = a pure pipeline
  // Pipeline depth assumed when sizing in-flight activations (a stage holds up to
  // min(depth, m) micro-batches under 1F1B-like schedules). partitionChain starts at 1
  // and deepens it until the plan it finds is no deeper than assumed; 0 = that loop.
  int assumed_depth = 0;
  // Chains longer than this are planned over this many blocks of consecutive layers
  // with equal compute (the DP is quadratic in the chain length).
  int max_blocks = 128;
  // Weight-sized buffers beyond versions and gradients (plan::extraWeightBuffers).
  int extra_weight_buffers = 0;
  // False: stages are not checked against memory. Schedules whose stage times agree
  // share that relaxation's optimum, which is each one's optimum wherever it fits
  // (fitsMemory): the exploration solves one DP for several schedules.
  bool check_memory = true;
  // The graph partitioner's budget of DP transitions (its searches give up past it,
  // both counted); ~10 million a second on this machine. The exploration shares a smaller one.
  int64_t max_graph_steps = 30'000'000;
  // kAuto: a stage that does not fit without recomputation is priced with it (one more
  // forward pass per micro-batch) where that makes it fit. The chain DP prices what a
  // recomputing stage keeps exactly; the graph partitioners price no saving.
  Recompute recompute = Recompute::kNone;
};

// One stage: blocks [first_block, end_block) on devices [first_device, end_device).
struct StageChoice {
  int first_block = 0, end_block = 0;
  int first_device = 0, end_device = 0;
  int replicas() const { return end_device - first_device; }
};

// What a block of devices offers one stage: its slowest replica, its smallest memory
// and the slowest hop of the replicas' all-reduce ring.
struct DeviceBlock {
  int first = 0, end = 0;
  double speed = 0, memory_bytes = 0, ring_bandwidth = 0, ring_latency = 0;
  double ring_host_bandwidth = std::numeric_limits<double>::infinity();  // Route::allreduce_host_bandwidth
  // What a stage's price on the block needs beyond its sums, priced once per block (the
  // DP prices every range of layers on every block it tries): whether the replicas may
  // split the micro-batches, the busiest replica's micro-batches and optimizer steps,
  // and its ring all-reduce as seconds + seconds per byte of parameters.
  bool usable = false;
  double share = 0, steps = 0, ring_seconds = 0, ring_seconds_per_byte = 0, ring_host_seconds_per_byte = 0;
  // And its memory at the DP's assumed depth: micro-batches in flight on the busiest
  // replica, and the copies of the weights the schedule keeps for them.
  int inflight = 0;
  double weight_copies = 0;
  int replicas() const { return end - first; }
};

// What a stage's layers add up to: compute and activations per micro-batch at speed 1
// (already scaled to the micro-batch size), the optimizer step per STEP, and bytes.
struct StageSums {
  double compute = 0, backward = 0, step = 0, activation = 0, params = 0, optimizer = 0;
  // What recomputation adds to `compute`: F runs without a graph (this), B runs the
  // forward pass with one again (already in `compute`).
  double forward = 0;
  double split = 0;    // held between a split schedule's I and W (0 under other schedules)
  // What a split schedule's I keeps to its end beyond the saved activations: the
  // gradients W starts from and each layer output's (0 under other schedules).
  double kept_gradients = 0;
  // Bytes per micro-batch a recomputing stage keeps from F to B: its inputs and the
  // outputs it sends. Not a sum over layers: set for a stage as a whole; -1 (what sums
  // and differences give) prices no saving.
  double kept = -1;
  // Inline: the DP and the graph searches add and subtract them in their inner loops.
  StageSums& operator+=(const StageSums& o) {
    compute += o.compute;
    backward += o.backward;
    step += o.step;
    activation += o.activation;
    params += o.params;
    optimizer += o.optimizer;
    forward += o.forward;
    split += o.split;
    kept_gradients += o.kept_gradients;
    kept = -1;
    return *this;
  }
  StageSums operator-(const StageSums& o) const {
    StageSums d;
    d.compute = compute - o.compute;
    d.backward = backward - o.backward;
    d.step = step - o.step;
    d.activation = activation - o.activation;
    d.params = params - o.params;
    d.optimizer = optimizer - o.optimizer;
    d.forward = forward - o.forward;
    d.split = split - o.split;
    d.kept_gradients = kept_gradients - o.kept_gradients;
    return d;  // kept: -1
  }
};

// The prices of every candidate stage and boundary; shared by the DP, the graph
// partitioner (graph_partition.h) and by tests that search exhaustively.
class ChainProblem {
 public:
  // Throws Error when the options cannot be used (no devices, bad micro-batch numbers).
  ChainProblem(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster, const PartitionOptions& options);

  const graph::LayerGraph& graph() const { return graph_; }
  const cluster::ClusterSpec& cluster() const { return cluster_; }
  int numBlocks() const { return static_cast<int>(block_start_.size()) - 1; }
  int numDevices() const { return devices_; }
  const PartitionOptions& options() const { return options_; }
  // Layer indices (the graph's topological order) of blocks [first, end).
  std::vector<int> layersOf(int first_block, int end_block) const;

  // Whether devices [first, end) may form one stage's replicas (see the header).
  bool allowedDevices(int first, int end) const;
  // Every first device d0 with allowedDevices(d0, end), largest first, found without
  // trying all of them (a 1024-device DP spent a quarter of its time on refusals).
  std::vector<int> allowedStarts(int end) const;
  // Those of allowedStarts whose replica count can run a stage at all
  // (schedule::replicasCanSplit, within max_replicas) and, of those whose busiest
  // replica runs the same share of the micro-batches, the fewest replicas (all of them
  // under use_all_devices): the DP's.
  std::vector<int> usefulStarts(int end) const;
  DeviceBlock deviceBlock(int first, int end) const;
  // Seconds per mini-batch of compute and all-reduce, without hostSeconds (which the
  // objective adds: unlike these, it can fall as the stage grows); infinity when the
  // stage does not fit its devices' memory or its replicas cannot split the micro-batches.
  // Recomputing under kFull, and under kAuto where the stage fits only so (its F again
  // for each of its micro-batches).
  double stageSeconds(int first_block, int end_block, const DeviceBlock& devices) const;
  double stageSeconds(int first_block, int end_block, int first_device, int end_device) const {
    return stageSeconds(first_block, end_block, deviceBlock(first_device, end_device));
  }
  // Host seconds per mini-batch that the stage's messages cost one of its replicas:
  // both directions of each cut it has, between its first device and the one before,
  // its last device and the one after.
  double hostSeconds(int first_block, int end_block, const DeviceBlock& devices) const;
  // Seconds per mini-batch for the activations crossing the cut before `block`, between
  // device `device - 1` and device `device`.
  double boundarySeconds(int block, int device) const;
  // Seconds per mini-batch of one message per micro-batch of `bytes` (per micro-batch)
  // on the route between two devices: how every planner prices a transfer.
  double messagesSeconds(double bytes, int from_device, int to_device) const;
  // Bytes per micro-batch of a layer's output.
  double outputBytes(int layer) const;
  // Bytes one replica of the stage needs at its peak, recomputing or not.
  double stageMemoryBytes(int first_block, int end_block, int replicas, bool recompute) const;

  // The same prices for any set of layers (a stage of a graph plan), pricing no saving
  // from recomputation (StageSums::kept unknown: the graph searches call this in their
  // inner loops, and a set's border costs a walk of the graph). `depth`: the
  // stages on the longest path from this one to the pipeline's end, itself included,
  // which sizes its in-flight micro-batches.
  StageSums sumsOf(const std::vector<int>& layers) const;
  double stageSeconds(const StageSums& stage, const DeviceBlock& devices, bool recompute = false) const;
  double stageMemoryBytes(const StageSums& stage, int replicas, int depth, bool recompute = false) const;
  // At the DP's assumed depth, from what the block priced once (DeviceBlock::inflight).
  double stageMemoryBytes(const StageSums& stage, const DeviceBlock& devices, bool recompute) const;
  // The graph partitioners' rule: every stage recomputes under kFull (priced as one more
  // F, with no memory saved: their sums leave `kept` unknown), none otherwise.
  bool recomputesAll() const { return options_.recompute == Recompute::kFull; }

  // The objective of a tiling (the largest stage or boundary time).
  double objective(const std::vector<StageChoice>& stages) const;

 private:
  // A replica's peak bytes with `inflight` micro-batches and `weight_copies` of the weights.
  double memoryBytes(const StageSums& stage, int inflight, double weight_copies, bool recompute) const;
  std::vector<int> starts(int end, bool useful_only) const;
  bool replicasUsable(int replicas) const;

  const graph::LayerGraph& graph_;
  const cluster::ClusterSpec& cluster_;
  PartitionOptions options_;
  const schedule::ScheduleTraits* traits_ = nullptr;  // of options_.schedule, looked up once
  int devices_ = 0;
  double scale_ = 1;                      // micro-batch size / profiled batch size: bytes scale by it
  // The most any layer's backward pass (I or W under a split schedule) holds beyond its saved
  // activations: a bound on a stage's, whose exact figure (sim::StageCosts) depends on
  // its layers' order, which sums cannot carry.
  double backward_transient_ = 0;
  int extra_weight_buffers_ = 0;
  std::vector<int> block_start_;          // first layer of each block, then the layer count
  StageSums layerSums(int layer) const;
  // With `kept`: what the stage receives and what it sends. Inline: the DP's inner loop.
  StageSums rangeSums(int first_block, int end_block) const {
    StageSums sums = prefix_[end_block] - prefix_[first_block];
    sums.kept = cut_bytes_[first_block] + cut_bytes_[end_block];
    return sums;
  }

  std::vector<StageSums> prefix_;         // over blocks: prefix_[b] = blocks [0, b)
  std::vector<double> cut_bytes_;         // per micro-batch, crossing the cut before each block
  std::vector<cluster::Route> hop_;  // [d]: the route from device d to d + 1
  bool hop_host_costs_ = false;      // whether any hop's messages take host time
  // Sparse tables over the devices (level k holds ranges of 2^k), so that deviceBlock()
  // is O(1) instead of a walk over the block's devices: on 1024 devices that walk, and
  // the route it asks for at every step, took a third of the exploration.
  std::vector<std::vector<double>> min_speed_, min_memory_, min_hop_allreduce_bandwidth_, max_hop_latency_;
  std::vector<std::vector<double>> min_hop_allreduce_host_bandwidth_;
  // Per device, cluster::allreduceCopySecondsPerByte; per hop, 1 where it goes through host memory.
  std::vector<std::vector<double>> max_allreduce_copy_, any_hop_through_host_;
};

struct Partition {
  std::vector<StageChoice> stages;
  double objective = 0;                   // seconds per mini-batch of the slowest part
  int assumed_depth = 0;                  // the depth memory was checked for
};

// The optimal tiling of the problem, by dynamic programming over (blocks, devices).
// Throws Error when no tiling fits memory (naming the largest layer's need and the
// largest device).
Partition solveChain(const ChainProblem& problem);

// How a stage's time counts the activations it receives and sends: hidden behind its
// compute (the DP's objective: a cut costs its own bar, apart from the stages), or added
// to it. The simulator lies between: on PipeDream's GNMT over servers joined at 3 GB/s,
// 3 stages of one server each cut 13 + 11 + 13 layers simulate well above 9 + 18 + 10,
// where the overlapped pricing ranks the second first (its second cut carries twice the
// first's bytes a micro-batch; bench/profiles/plans/gnmt-2bw-*; measured: docs/planner.md,
// "Fixed schedules against an oracle").
enum class Transfers { kOverlapped, kSerialized };

// The best cut of the layers into stages on given blocks of devices: stage s on devices
// [device_bounds[s], device_bounds[s + 1]), replicas that may straddle part of a node
// (the DP's own blocks never do). Its objective is ChainProblem::objective's under
// kOverlapped; under kSerialized each stage's time adds the transfers over both its cuts.
// Nothing where no cut fits memory or splits the micro-batches; Error where the bounds are
// not a tiling of a prefix of the devices.
std::optional<Partition> solveChainOnDevices(const ChainProblem& problem, const std::vector<int>& device_bounds,
                                             Transfers transfers = Transfers::kOverlapped);

// Whether every stage of `partition` fits its devices' memory under `problem`'s options.
bool fitsMemory(const Partition& partition, const ChainProblem& problem);

// The Plan of a partition (layer and device names, schedule options as given).
plan::Plan toPlan(const Partition& partition, const ChainProblem& problem, const plan::ScheduleOptions& schedule);

struct ChainPlan {
  plan::Plan plan;
  Partition partition;
};
// solveChain and toPlan; with options.assumed_depth = 0 the depth is deepened until the
// plan found is no deeper than assumed.
ChainPlan partitionChain(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                         const PartitionOptions& options, const plan::ScheduleOptions& schedule);

}  // namespace pipetrain::planner
