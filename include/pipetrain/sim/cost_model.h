// CostModel: prices compute, transfers and memory for one plan on one cluster.
// The simulator and (later) the planner use this one class, so a plan's predicted time
// is exactly the simulator's time.
//
// Compute: a layer's profiled time x (micro-batch size / profiled batch size) / the
// device's speed. Transfers: latency + bytes / bandwidth on the route between the two
// devices (contention is the simulator's job). The runtime's own time: a fixed cost
// around each action of a rank (actionOverhead). Ranks are numbered as the Program's:
// stage by stage, replica by replica (for interleaved, rank r = the device of stage r).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/cluster/cluster_spec.h"
#include "pipetrain/graph/layer_graph.h"
#include "pipetrain/plan/plan.h"
#include "pipetrain/schedule/action.h"
#include "pipetrain/schedule/schedules.h"
#include "pipetrain/schedule/weight_versions.h"

namespace pipetrain::sim {

// The formulas, shared with the planner so that its estimates price exactly what the
// simulator prices.
// Ring all-reduce of `bytes` over `n` ranks: 2(n-1) steps, each moving bytes/n over the
// slowest hop of the ring (`bandwidth`, `latency`).
double ringAllreduceSeconds(double bytes, int n, double bandwidth, double latency);
// The CPU time it takes each rank where the hosts move and sum the ring's traffic
// (cluster_spec.h, allreduce_host_bandwidth): the 2(n-1)/n of the bytes each rank sends.
double ringAllreduceHostSeconds(double bytes, int n, double host_bandwidth);
// One message alone on its route.
double transferSeconds(double bytes, const cluster::Route& route);
// The expected largest of n independent standard normal draws: how many standard
// deviations after their mean the last of n replicas that wander so arrives (0 for n = 1,
// 1/sqrt(pi) for 2, 1.03 for 4, 2.51 for 100).
double expectedMaxOfNormals(int n);
// Replicas reduce their gradients in buckets of this many bytes (the runtime's
// GradientBuckets), each as soon as the backward pass has filled it, in the order the
// pass produces them: small enough that a large stage's first buckets go out early in
// the pass, large enough that an all-reduce's fixed cost stays small.
inline constexpr int64_t kGradientBucketBytes = int64_t{4} << 20;
// The share of a backward pass over `param_bytes` of weights after which its first
// bucket is full and the reduction can begin: 1 for a stage of one bucket or none.
double firstBucketShare(double param_bytes);

struct StageCosts {
  double forward = 0, backward_input = 0, backward_weight = 0;  // seconds at speed 1
  double split_weight = 0;      // a split schedule's W action (Layer::splitWeightSeconds)
  double recompute = 0;         // the forward pass (of the recomputed layers) again before B (or I)
  double optimizer_step = 0;    // seconds at speed 1, once per STEP
  double backward_call = 0;     // once per B, I and W: the engine's call (graph::LayerGraph::backwardCallSeconds)
  double activation_bytes = 0;  // saved per micro-batch from F until B (or I)
  double split_activation_bytes = 0;  // the same between a split schedule's I and W
  // The most a micro-batch's B, or a split schedule's I, holds at once beyond what the
  // micro-batch held before it: the gradients flowing through a layer, less the saved
  // activations of the layers B already freed (I keeps them, and the gradients it keeps
  // for W). The gpt's zb-h1 I at 16 samples: 24.5 MiB, beside 35 MiB saved.
  double backward_peak_bytes = 0;
  double input_backward_peak_bytes = 0;
  // The same for a split schedule's W: the weight gradients it makes and its layers'
  // passing tensors (Layer::weightPassPeakAt).
  double weight_peak_bytes = 0;
  // A recomputing stage: what one micro-batch holds while it is recomputed and its
  // backward pass runs (the recomputed layers' saved activations), on top of what the
  // others keep (their inputs, kept outputs and the layers not recomputed), which is then
  // its activation_bytes. 0 when the stage does not recompute.
  double recompute_peak_bytes = 0;
  double param_bytes = 0;
  double optimizer_bytes = 0;
  schedule::StageVersionCosts versions;  // its weights beyond computing with them (plan::stageVersionCosts)
  bool holds_data = false;  // its ranks load the input or the labels (graph::ProcessMemory::data_bytes)
};

class CostModel {
 public:
  // REQUIRES: plan::validate(plan, graph, cluster) passed.
  CostModel(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster, const plan::Plan& plan);

  const plan::Plan& plan() const { return plan_; }
  const graph::LayerGraph& graph() const { return graph_; }
  const cluster::ClusterSpec& cluster() const { return cluster_; }
  const schedule::StageDag& dag() const { return dag_; }
  const std::vector<int>& replicas() const { return replicas_; }  // per stage
  int numRanks() const { return static_cast<int>(rank_device_.size()); }
  int deviceOfRank(int rank) const { return rank_device_[rank]; }
  const StageCosts& stage(int s) const { return stages_[s]; }

  // F, B, I, W and STEP on `rank`.
  double computeSeconds(const schedule::Action& action, int rank) const;
  // What the same action does to its stage's weight versions on `rank` beyond computing
  // (schedule::versionWork says what): swaps, copies and PipeMare's correction.
  double versionSeconds(const schedule::Action& action, const schedule::VersionWork& work, int rank) const {
    return schedule::versionSeconds(action.type, work, stages_[action.stage].versions) /
           cluster_.device(rank_device_[rank]).speed;
  }
  // Whether any stage's weight versions cost time (profiles from before they were
  // measured, and published ones, have none), and whether PipeMare's T2 runs.
  bool pricesVersions() const { return prices_versions_; }
  bool correctsDiscrepancy() const { return plan_.schedule.pipemare_correction; }
  // Bytes of the message a SEND_F, SEND_B, RECV_F or RECV_B action moves.
  double messageBytes(const schedule::Action& message) const;
  // Bytes per micro-batch on the stage DAG's edge `from` -> `to` (either direction).
  double edgeBytes(int from, int to) const;
  // Seconds that such an action takes from `rank`, talking to `peer_rank`, in which it
  // cannot compute: the route's host cost and copies through host memory
  // (cluster::messageEndSeconds), zero where the cluster gives none.
  double hostSeconds(const schedule::Action& message, int rank, int peer_rank) const;
  cluster::Route route(int from_rank, int to_rank) const;
  // The runtime's own seconds around each action `rank` runs (cluster::Device's
  // action_overhead): the rank can start no action sooner after its previous one.
  double actionOverhead(int rank) const { return cluster_.device(rank_device_[rank]).action_overhead; }
  // The part of it that grows with the compute action just ended: its share of that.
  double actionOverheadShare(int rank) const { return cluster_.device(rank_device_[rank]).action_overhead_share; }
  // Ring all-reduce of stage s's gradients over its replicas: how long it takes, and how
  // much of each replica's core it takes (ringAllreduceHostSeconds).
  double allreduceSeconds(int stage) const { return allreduce_[stage].seconds; }
  double allreduceHostSeconds(int stage) const { return allreduce_[stage].host_seconds; }
  // How long stage s's replicas wait at their meeting for the last to arrive, beyond the
  // arrival priced, as a share of the compute each ran since its previous meeting: the
  // expected maximum of their devices' compute_jitter (cluster::Device). 0 for one replica.
  double meetingWaitShare(int stage) const { return allreduce_[stage].wait_share; }
  // An overlapped F&B pair takes this share of F + B (the profile's overlap factor).
  double overlapFactor() const { return graph_.overlapFactor(); }

 private:
  const graph::LayerGraph& graph_;
  const cluster::ClusterSpec& cluster_;
  const plan::Plan& plan_;
  schedule::StageDag dag_;
  std::vector<std::vector<double>> edge_bytes_;  // [from][to-index in dag succs], per micro-batch
  std::vector<StageCosts> stages_;
  std::vector<int> replicas_;
  std::vector<int> rank_device_;
  bool ends_free_ = false;        // no route of the cluster costs its ends host time (cluster::endsFree)
  bool prices_versions_ = false;  // some stage's weight versions cost time (pricesVersions)
  struct AllreduceCost {
    double seconds = 0, host_seconds = 0, wait_share = 0;
  };
  std::vector<AllreduceCost> allreduce_;  // per stage, priced once: the simulator asks per STEP

  AllreduceCost ringAllreduceOf(int stage) const;
};

}  // namespace pipetrain::sim
