// Explorer: one exploration's state and steps (explore.h's explore()): what was
// proposed (to simulate each plan once), kept and dropped. propose.cpp proposes plans,
// explorer.cpp simulates them best first; refine.cpp walks from the best to better
// neighbours.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "explore_internal.h"
#include "pipetrain/planner/chain_partition.h"
#include "pipetrain/planner/graph_partition.h"
#include "pipetrain/planner/neighbours.h"

namespace pipetrain::planner::detail {

// Why a simulated plan cannot run: the rank that misses its memory most, or "" when all fit.
std::string memoryShortfall(const sim::Report& r);
// Everything that tells two proposals apart (the explorer sets no other schedule option).
std::string planKey(const plan::Plan& p);

class Explorer {
 public:
  Explorer(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster, const ExploreOptions& o,
           Exploration& result);

  // Proposes and simulates, best first, every schedule x micro-batch size x width.
  void search(const std::vector<int>& widths, const std::vector<std::string>& names,
              const std::vector<int64_t>& sizes);
  // Then walks from the best chain and multi-stage plans to better simulated neighbours.
  void refine();
  void recomputeLess();

 private:
  struct Proposal {
    Candidate candidate;
    Dropped drop;
    double bound = 0;  // samples/s no simulation of the plan can exceed
    int order = 0;     // among equal bounds, the first proposed goes first
  };
  struct ByBound {
    bool operator()(const Proposal& a, const Proposal& b) const {
      return a.bound != b.bound ? a.bound < b.bound : a.order > b.order;
    }
  };

  // Proposing (propose.cpp).
  void explore(const std::string& name, int64_t b, int width);
  void exploreGraph(const std::string& name, int64_t b, int width);
  void proposeDataParallel(const std::string& name, int64_t b, int width, const std::string& by);
  void exploreChain(const std::string& name, int64_t b, int width, const std::string& by);
  void proposeCopiedPipelines(const std::string& name, int64_t b, int width);
  void proposeShapedPipelines(const std::string& name, int64_t b, int width);
  void consider(const std::string& name, int64_t b, int width, const std::function<std::optional<Candidate>()>& propose);
  ChainPlan partitionShared(PartitionOptions po, const plan::ScheduleOptions& schedule);
  GraphPlan graphShared(PartitionOptions po, const plan::ScheduleOptions& schedule, GraphSearch search);
  static std::string sharedKey(const PartitionOptions& po);
  PartitionOptions partitionOptions(const std::string& name, int64_t b, int width) const;
  // `width` devices as copies of one pipeline, from `fewest` copies up: each count that
  // divides the devices and the micro-batches, with the options of one copy's block (its
  // share of the micro-batches, the copies, a stage's replicas within max_replicas over
  // all copies).
  struct CopyBlock {
    int copies = 1;
    int block = 0;  // devices per copy
    PartitionOptions po;
  };
  std::vector<CopyBlock> copyBlocks(const std::string& name, int64_t b, int width, int fewest) const;
  std::vector<int> replicaLimits() const;
  void addGraphNote(const std::string& note);
  int64_t graphStepsBudget() const;
  int64_t graphStepsLeft() const;

  // Simulating, best first (explorer.cpp).
  // Recomputation as the policy applies it before simulating: every stage under kFull.
  void recomputeAsAsked(plan::Plan& plan) const;
  // The plan simulated (sim::predictReportAbove) as the policy runs it: under kAuto, where
  // ranks miss their memory their stages recompute and it is simulated again, `plan`
  // changed to match. Recomputation only slows a stage: a bar missed stays missed.
  std::optional<sim::Report> simulate(plan::Plan& plan, double to_beat) const;
  const Proposal* bestProposal() const { return proposals_.empty() ? nullptr : &proposals_.front(); }
  Proposal takeBestProposal();
  void keepPruned(Candidate c);
  void evaluateBest(double next_combination_bound);
  bool cannotWin(double bound, const std::string& schedule, int64_t microbatch_size) const;
  double barOf(const std::string& family) const;
  double toBeat(const std::string& schedule, bool single_stage, int64_t microbatch_size) const;

  // Bounds (explorer.cpp).
  double combinationBound(int64_t b, int width) const;
  double resourceBound(const plan::Plan& plan) const;
  double computeBound(const plan::Plan& like, const ChainRuns& runs) const;
  const std::vector<double>& workPrefix(int64_t b) const;
  static double busySeconds(const plan::Plan& plan, int replicas, double work, double step, double speed);
  static double boundOf(const plan::Plan& plan, double busiest_seconds);

  // Adds a simulated plan to the ranking, where refine() finds it by its planKey().
  void rank(Candidate c);

  // Refining (refine.cpp).
  std::optional<Candidate> stepFrom(const Candidate& current, int& budget, bool cuts_only = false);
  int addSpareStarts(std::vector<Candidate>& starts, const std::function<bool(const Candidate&)>& refinable);
  std::vector<std::pair<double, std::function<plan::Plan()>>> neighboursOf(const plan::Plan& plan,
                                                                           bool cheaper_cuts) const;
  void addChainNeighbours(std::vector<std::pair<double, std::function<plan::Plan()>>>& out, const plan::Plan& pipeline,
                          const ChainRuns& runs, int copies, int width, bool cheaper_cuts) const;

  const graph::LayerGraph& graph_;
  const cluster::ClusterSpec& cluster_;
  const ExploreOptions& o_;
  Exploration& result_;
  const bool graph_partitioner_, chain_partitioner_;  // which propose plans (ExploreOptions::partitioner)
  std::set<std::string> seen_;  // plans proposed so far, by planKey()
  std::map<std::string, std::size_t> ranked_at_;  // simulated plans' places in result_.ranked, by planKey()
  std::vector<Proposal> proposals_;  // a heap by ByBound: the highest bound on top
  // Proposals pruned by their bounds, the best-bounded first (keepPruned()): some of a
  // fixed schedule's walks start from these (refine()).
  std::vector<Candidate> pruned_proposals_;
  int proposed_ = 0;
  // The best simulated throughput so far, per family of schedules that compete
  // (PlanObjective::family): one family under the throughput objective.
  std::map<std::string, double> best_;
  int simulated_ = 0;
  std::vector<double> fastest_speeds_;  // [k]: the sum of the k fastest devices' speeds
  std::vector<double> step_prefix_;  // [k]: layers [0, k) (see the constructor)
  mutable std::map<int64_t, std::vector<double>> work_prefix_;  // by micro-batch size: workPrefix()
  mutable std::vector<double> crossing_;                        // crossingBytes(graph_), made on first use
  std::map<std::string, std::optional<Partition>> relaxed_;  // partitionShared's optima, by what they share
  std::map<std::string, std::optional<GraphPartition>> graph_relaxed_;  // graphShared's
};

}  // namespace pipetrain::planner::detail
