// BaPipe-style joint exploration: for a model, a cluster and a global batch, try every
// schedule x micro-batch size x pipeline width; for each, propose the chain DP's optimum,
// the DP's best pure pipeline, pure data parallelism, a pipeline copied onto blocks of
// the width (replicated_pipeline.h) and, under a fixed schedule, pipelines of given
// device shapes (for interleaved, a balanced split); drop what does not fit memory under
// the schedule's real footprint, score the rest with the simulator, and rank them.
//
// The width is how many of the cluster's devices a candidate may use (powers of two up
// to all of them, or all of them when asked to); within it the DP chooses the stages and their replicas. Scores are
// the simulator's steady-state throughput, so the ranking includes what the DP's
// bottleneck objective leaves out: the bubble of the schedule, contention, fill and drain.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipetrain/cluster/cluster_spec.h"
#include "pipetrain/graph/layer_graph.h"
#include "pipetrain/plan/plan.h"
#include "pipetrain/planner/chain_partition.h"
#include "pipetrain/planner/objective.h"
#include "pipetrain/sim/evaluate.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::planner {

// Which partitioner proposes plans: PipeDream's chain DP over the layers' topological
// order, GraphPipe's over the series-parallel tree (graph_partition.h), or both with the
// simulator choosing (auto). Under auto the graph partitioner runs only where the tree
// has parallel branches (a skip connection alone makes none: there it would propose
// what the chain DP does, at up to 1000x the cost), and within a budget of DP steps.
enum class Partitioner { kAuto, kChain, kGraph };
Partitioner partitionerFromName(const std::string& name);  // "auto", "chain", "graph"; Error otherwise
const char* partitionerName(Partitioner p);

struct ExploreOptions {
  int64_t global_batch = 0;             // samples per optimizer step
  std::string schedule = "auto";        // auto = every schedule allowed, or one name
  bool allow_async = false;             // include pipedream, 2bw, pipemare under auto
  std::vector<int64_t> microbatch_sizes;  // empty = defaultMicrobatchSizes(batch, the profile's smallest)
  int max_blocks = 128;                 // see PartitionOptions
  int max_replicas = 0;                 // see PartitionOptions
  bool use_all_devices = false;         // only plans that occupy every device (a job's ranks)
  // Shortcuts that keep the choice: skip what a bound says cannot win, and share
  // one DP among schedules with the same stage times where it fits their memory. False:
  // solve and simulate everything (the reference the shortcuts are tested against).
  bool prune = true;
  Partitioner partitioner = Partitioner::kAuto;
  // How far the profile's times may be off, as a fraction (train: the spread its timed
  // passes agreed within). Plans predicted within it of the best are equals: the choice
  // among them goes by the plan's shape (choiceOrder), so that profiling again, with
  // other noise, chooses the same plan. 0: only throughput ties (0.1%) are equals.
  double noise = 0;
  // What the ranking puts first (objective.h): the most samples per second, or, for
  // example, the least time to a loss (time_to_target.h), which also weighs how much each
  // plan's update rule trains per sample.
  const PlanObjective* objective = &throughputObjective();
  // Groups of layers that hold one weight (tied embeddings). Each holder keeps a copy that
  // stays equal only where every stage steps together: a plan whose asynchronous schedule
  // puts a group's layers on different stages is dropped, with the layers named.
  std::vector<std::vector<std::string>> tied_layers;
  // Activation recomputation (PartitionOptions::recompute). kAuto: the DPs price it on
  // stages that fit only with it, and every simulated plan whose ranks miss their memory
  // is simulated again with those ranks' stages recomputing (AdaPipe's per-stage choice).
  Recompute recompute = Recompute::kAuto;
};

// Why a plan cannot train its tied layers (ExploreOptions::tied_layers) as one weight:
// the first group an asynchronous schedule would split, or "" where none is.
std::string tiedLayersApart(const plan::Plan& plan, const std::vector<std::vector<std::string>>& tied_layers);

// A plan's predicted time to the calibration's target loss (time_to_target.h).
struct TargetEstimate {
  std::string rule;             // its update rule's key (update_rule.h)
  bool calibrated = false;      // false: its rule was not calibrated, nothing below is known
  bool reached = false;         // its rule reached the target within the calibration
  double efficiency = 0;        // progress per sample relative to synchronous training
  double seconds = 0, seconds_low = 0, seconds_high = 0;  // predicted, with the calibration's noise
};

struct Candidate {
  plan::Plan plan;
  sim::Report report;                   // simulated; report.ranks has peak memory per rank
  double dp_objective = 0;              // the DP's bottleneck (0 for balanced splits)
  int depth = 0;                        // stages on the stage graph's longest path
  // What proposed it: "chain", "graph", "sequential" (the graph partitioner's chain of
  // stages in topological order, from the chain DP: propose.cpp), "balanced"
  // (multi-stage schedules), "copies" (the chain DP's pipeline on a block of devices
  // copied onto the next blocks, replicated_pipeline.h), "shaped" (under a fixed
  // schedule, the chain DP's cut of the layers on given blocks of devices, alone or
  // copied: equal blocks, or a replicated stage then single devices) or "refined" (a
  // neighbour of a chain plan that simulated faster, neighbours.h).
  std::string partitioner = "chain";
  std::optional<TargetEstimate> to_target = std::nullopt;  // under the time-to-accuracy objective
};

// A combination that produced no candidate, and why (did not fit, numbers unusable).
struct Dropped {
  std::string schedule;
  int64_t microbatch_size = 0;
  int devices = 0;
  std::string reason;
};

// Under time to accuracy: the loss the times are to, the samples calibration trained per
// rule, its noise, and what became of the rules. One JSON form, in `plan --json` and in a
// run's planner record (report/planner_record.h).
struct CalibrationFigures {
  double target_loss = 0;
  int64_t samples_per_rule = 0;
  double noise = 0;
  int rules_measured = 0, rules_cached = 0, plans_bounded = 0, rules_over_budget = 0;

  json_io::Json toJson() const;
  // Error naming the field where one is of the wrong type; a missing one stays 0.
  static CalibrationFigures fromJson(const json_io::JsonCursor& json);
};

struct Exploration {
  std::vector<Candidate> ranked;        // fitting candidates, best throughput first
  std::vector<Dropped> dropped;
  int pruned = 0;                       // proposals not ranked: their bound (sim::throughputBound), or a shorter
                                        // mini-batch simulated (sim::predictReportAbove), could not win
  int pruned_combinations = 0;          // schedule x micro-batch x width left unsolved: likewise
  double search_seconds = 0;
  bool async_included = false;
  // Nonzero where nothing fitted at the sizes the profile timed, so that smaller
  // micro-batches were tried: the smallest it timed, from which their times scale in
  // proportion (defaultMicrobatchSizes).
  int64_t below_timed_batch = 0;
  int cluster_devices = 0;              // of the cluster explored
  int graph_layers = 0;                 // of the model explored
  std::vector<std::string> graph_notes; // the graph partitioner's (parts taken as chains)
  int64_t graph_search_steps = 0;       // the graph partitioner's DP transitions, all searches
  double noise = 0;                     // ExploreOptions::noise
  int within_noise = 0;                 // distinct plans within it of the best prediction (the chosen one included)
  double best_predicted = 0;            // the best prediction, where another plan within the noise was chosen
  const PlanObjective* objective = &throughputObjective();  // what ranked it
  std::vector<std::string> ranking_notes;  // the objective's, on how it ranked (e.g. why it fell back to throughput)
  double calibration_seconds = 0;          // training the objective's calibrator did: not in search_seconds
  // Under the time-to-accuracy objective (time_to_target.h): the loss the times are to,
  // the samples that calibration trained per rule, its noise, and the plan throughput
  // alone would have chosen.
  double target_loss = 0;
  int64_t calibration_samples = 0;
  double calibration_noise = 0;
  int rules_measured = 0;                // by training (a cached curve counts as measured before)
  int rules_cached = 0;
  int plans_bounded = 0;                 // asynchronous plans whose rule was not looked at: even perfect
                                         // scaling would not win
  int rules_over_budget = 0;             // not measured: beyond the calibration's rule limit
  std::optional<Candidate> throughput_choice;

  const Candidate& best() const { return ranked.front(); }
  // One sentence on why the runner-up (the next plan that runs differently:
  // sameDataParallelRun) lost to ranked[0] ("" where there is none).
  std::string runnerUpLost() const;
  // When the best plan leaves devices idle: how many, and the nearest micro-batch count
  // that p stages x r replicas could split over every device (r must divide it); ""
  // when every device is used.
  std::string idleDevicesNote() const;
  // Where ExploreOptions::noise made several plans equals: how many, and how the choice
  // among them was made; "" otherwise.
  std::string noiseNote() const;
  json_io::Json toJson() const;         // the chosen plan's summary plus the table
  json_io::Json candidateJson(const Candidate& c) const;  // one row of toJson's table
  // Under time to accuracy: the target loss, the samples per rule, the noise and what
  // became of the rules (toJson's, and a run summary's "calibration").
  CalibrationFigures calibrationFigures() const;
};

// The micro-batch sizes the planner tries for `batch` where none are given: from the
// profile's smallest timed size (or the batch, if smaller) up, its powers of two and
// the batch over powers of two, so that data parallelism (the batch over the ranks) and
// pipelines of many micro-batches are both there for a batch that is no power of two.
// Smaller ones only where none of these fits (Exploration::below_timed_batch).
std::vector<int64_t> defaultMicrobatchSizes(int64_t batch, int64_t smallest_timed);

// The schedules `options.schedule` stands for.
std::vector<std::string> schedulesToExplore(const ExploreOptions& options);

// Searches, then ranks by options.objective, with what it needs from `inputs`. Stages
// go over the devices in cluster::chainOrder's order, so a slow link between hosts
// joins the chain's last ones. Throws
// Error when the batch or schedule is unusable, when the objective lacks an input, or
// when nothing fits (listing the reasons of the dropped combinations).
Exploration explore(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster, const ExploreOptions& options,
                    const ObjectiveInputs& inputs = {});

// Synchronous data parallelism: one stage under a schedule that steps once per
// mini-batch. It runs alike under each such schedule: they only order its passes
// differently, which changes its memory.
bool isDataParallel(const plan::Plan& plan);
// Whether `a` and `b` are that same run (replicas, micro-batch size and count): the
// ranking lists it once.
bool sameDataParallelRun(const plan::Plan& a, const plan::Plan& b);

// A plan in words: "1f1b, 3 stages (1x2+2x1)", what recomputes, or for one stage
// "data parallelism on 4 devices (...)".
std::string planName(const plan::Plan& plan);

// Why `loser` is slower than `winner`, in the report's terms (bubble, bottleneck, memory).
std::string whySlower(const Candidate& winner, const Candidate& loser);

}  // namespace pipetrain::planner
