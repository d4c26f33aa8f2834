#include "pipetrain/planner/explore.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "explore_internal.h"
#include "pipetrain/graph/series_parallel.h"
#include "pipetrain/plan/plan_program.h"
#include "pipetrain/planner/chain_partition.h"
#include "pipetrain/planner/graph_partition.h"
#include "pipetrain/planner/neighbours.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/schedule/schedules.h"
#include "pipetrain/sim/throughput_bound.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/text.h"

namespace pipetrain::planner {
namespace {

using detail::devicesUsed;
using detail::kInterleavedChunks;
using detail::microbatchSizes;
using detail::multiStagePlan;
using detail::widths;
using detail::kTie;
using detail::throughputTier;

// Proposals simulated before any is pruned by its bound.
constexpr int kAlwaysSimulated = 5;
// The widest plan the graph partitioner is asked for: 0.5 s for 33 layers on 32 devices
// (bench/planner_bench graphPartition), about 4x more per doubling.
constexpr int kMaxGraphDevices = 64;
// The graph partitioner's budget of DP steps for a whole exploration beside the chain DP
// (about 0.4 s on this machine), and alone (--partitioner graph). Small models never
// reach it; PipeDream's ResNet-50 and Inception-v3 reach it at their first search on 16
// or more devices, whose plans then come from the chain DP.
constexpr int64_t kGraphStepsBesideChain = 4'000'000;
constexpr int64_t kGraphStepsAlone = 30'000'000;
// The refinement's simulations: at most this many, and at most this much work simulated
// in all, in ranks x micro-batches (simulationWork): a plan on 264 devices at 64
// micro-batches gets 7 neighbours, about 0.2 s; one on 1024 devices 2.
constexpr int kRefineSimulations = 128;
constexpr int64_t kRefineWork = 2048 * 64;

// What simulating a plan costs: ranks x the micro-batches predictReport simulates (where
// the extrapolation holds; more where it simulates the mini-batch whole).
int64_t simulationWork(const plan::Plan& p) {
  const auto points = sim::extrapolationPoints(p);
  const int64_t microbatches = points ? points->first + points->second : p.microbatches;
  return devicesUsed(p) * microbatches;
}
constexpr std::size_t kRefineStarts = 3;

// The rank that misses its memory most, or "" when all fit.
std::string memoryShortfall(const sim::Report& r) {
  for (const auto& rank : r.ranks)
    if (rank.peak_memory_bytes > rank.memory_capacity_bytes)
      return "needs " + text::humanBytes(static_cast<double>(rank.peak_memory_bytes)) + " on " + rank.device +
             ", which has " + text::humanBytes(static_cast<double>(rank.memory_capacity_bytes));
  return "";
}

// Everything that tells two proposals apart (the explorer sets no other schedule option),
// written directly: a JSON dump of a 1024-device plan cost more than its simulation.
std::string planKey(const plan::Plan& p) {
  std::string key = p.schedule.name + "/" + std::to_string(p.schedule.chunks) + "/" +
                    std::to_string(p.microbatch_size) + "/" + std::to_string(p.microbatches);
  for (const plan::Stage& s : p.stages) {
    key += "|" + s.layers.front() + "+" + std::to_string(s.layers.size()) + ":";
    for (const std::string& d : s.devices) key += d + ",";
  }
  return key;
}

}  // namespace

Partitioner partitionerFromName(const std::string& name) {
  for (Partitioner p : {Partitioner::kAuto, Partitioner::kChain, Partitioner::kGraph})
    if (name == partitionerName(p)) return p;
  throw Error("unknown partitioner '" + name + "' (known: auto, chain, graph)");
}

const char* partitionerName(Partitioner p) {
  switch (p) {
    case Partitioner::kChain: return "chain";
    case Partitioner::kGraph: return "graph";
    default: return "auto";
  }
}

std::vector<std::string> schedulesToExplore(const ExploreOptions& o) {
  if (o.schedule != "auto") {
    schedule::checkScheduleName(o.schedule);
    return {o.schedule};
  }
  std::vector<std::string> names;
  for (const auto& s : schedule::scheduleNames())
    if (o.allow_async || !schedule::isAsynchronous(s)) names.push_back(s);
  return names;
}

namespace {

// One exploration's state: what was proposed (to simulate each plan once), what was kept
// and what was dropped.
class Explorer {
 public:
  Explorer(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster, const ExploreOptions& o,
           Exploration& result)
      : graph_(graph), cluster_(cluster), o_(o), result_(result),
        graph_partitioner_(o.partitioner == Partitioner::kGraph ||
                           (o.partitioner == Partitioner::kAuto && graph::hasBranches(graph::seriesParallel(graph)))),
        chain_partitioner_(o.partitioner != Partitioner::kGraph) {
    std::vector<double> speeds;
    for (int d = 0; d < cluster.size(); ++d) speeds.push_back(cluster.device(d).speed);
    std::sort(speeds.rbegin(), speeds.rend());
    fastest_speeds_.push_back(0);
    for (double v : speeds) fastest_speeds_.push_back(fastest_speeds_.back() + v);
    // Prefix sums over the layers of the optimizer steps (workPrefix: the passes').
    step_prefix_.push_back(0);
    for (const graph::Layer& l : graph.layers()) step_prefix_.push_back(step_prefix_.back() + l.optimizer_seconds);
  }

  // Samples/s that no plan on at most `width` devices at micro-batch size `b` can
  // exceed: the mini-batch's compute spread perfectly over the `width` fastest devices
  // (replicas only add work: each steps its own copy). Every proposal's compute bound is
  // below it, so a combination whose bound cannot beat the best simulated plan is
  // skipped before its DPs run.
  double combinationBound(int64_t b, int width) const {
    const double microbatches = static_cast<double>(o_.global_batch / b);
    const double work = microbatches * workPrefix(b).back() + step_prefix_.back();
    return work > 0 ? static_cast<double>(o_.global_batch) * fastest_speeds_[width] / work
                    : std::numeric_limits<double>::infinity();
  }

  // partitionChain, through the optimum without memory limits that the schedules with
  // the same stage times share (PartitionOptions::check_memory): where it fits this
  // schedule's memory, no partition can do better, and the schedule's own DPs are not
  // run. Results are the same; on clusters where memory does not bind, one DP serves
  // gpipe, 1f1b, zb-h1 and zb-h2 (and 2bw, pipemare).
  ChainPlan partitionShared(PartitionOptions po, const plan::ScheduleOptions& schedule) {
    const std::string key = sharedKey(po);
    auto it = relaxed_.find(key);
    if (it == relaxed_.end()) {
      PartitionOptions free = po;
      free.check_memory = false;
      free.assumed_depth = 1;
      std::optional<Partition> optimum;
      try {
        optimum = solveChain(ChainProblem(graph_, cluster_, free));
      } catch (const Error&) {
        // no tiling at all (divisibility): the schedule's own DP says why
      }
      it = relaxed_.emplace(key, std::move(optimum)).first;
    }
    if (it->second) {
      po.extra_weight_buffers = plan::extraWeightBuffers(schedule);
      po.assumed_depth = static_cast<int>(it->second->stages.size());
      const ChainProblem problem(graph_, cluster_, po);
      if (fitsMemory(*it->second, problem)) {
        Partition p = *it->second;
        p.objective = problem.objective(p.stages);
        p.assumed_depth = po.assumed_depth;
        return {toPlan(p, problem, schedule), p};
      }
    }
    return partitionChain(graph_, cluster_, po, schedule);
  }

  void addGraphNote(const std::string& note) {
    auto& notes = result_.graph_notes;
    if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(note);
  }

  // What decides a stage's time (not its memory): schedules that agree on it share the
  // partitioners' optima without memory checks.
  static std::string sharedKey(const PartitionOptions& po) {
    const schedule::ScheduleTraits& t = schedule::traits(po.schedule);
    return std::to_string(po.microbatch_size) + "/" + std::to_string(po.max_devices) + "/" +
           std::to_string(po.use_all_devices) + "/" + std::to_string(po.max_replicas) + "/" +
           std::to_string(t.replicable) + "/" + std::to_string(static_cast<int>(t.step_rule));
  }

  // partitionShared's counterpart for the graph partitioner, whose search costs far more.
  GraphPlan graphShared(PartitionOptions po, const plan::ScheduleOptions& schedule, GraphSearch search) {
    const std::string key = sharedKey(po) + "/" + std::to_string(static_cast<int>(search));
    auto it = graph_relaxed_.find(key);
    if (it == graph_relaxed_.end()) {
      PartitionOptions free = po;
      free.check_memory = false;
      std::optional<GraphPartition> optimum;
      try {
        free.max_graph_steps = graphStepsLeft();
        optimum = solveGraph(graph_, cluster_, free, search);
      } catch (const GraphSearchGaveUp&) {
        throw;
      } catch (const Error&) {
        // no tiling at all (divisibility): the schedule's own search says why
      }
      if (optimum) result_.graph_search_steps += optimum->search_steps;
      it = graph_relaxed_.emplace(key, std::move(optimum)).first;
    }
    po.extra_weight_buffers = plan::extraWeightBuffers(schedule);
    if (it->second && fitsMemory(*it->second, graph_, cluster_, po))
      return {toPlan(*it->second, graph_, cluster_, po, schedule), *it->second};
    po.max_graph_steps = graphStepsLeft();
    GraphPlan g = partitionGraph(graph_, cluster_, po, schedule, search);
    result_.graph_search_steps += g.partition.search_steps;
    return g;
  }

  // The graph partitioner's budget of DP steps for the whole exploration, less what its
  // searches took so far.
  int64_t graphStepsBudget() const { return chain_partitioner_ ? kGraphStepsBesideChain : kGraphStepsAlone; }
  int64_t graphStepsLeft() const { return graphStepsBudget() - result_.graph_search_steps; }

  // Whether a combination of that bound cannot beat the best plan simulated so far.
  bool cannotWin(double bound) const {
    return o_.prune && simulated_ >= kAlwaysSimulated && bound < best_ * std::exp(-2 * kTie);
  }

  // Every proposal for one schedule, micro-batch size and width: the partitioners' or a
  // multi-stage schedule's balanced split.
  void explore(const std::string& name, int64_t b, int width) {
    const int m = static_cast<int>(o_.global_batch / b);
    const schedule::ScheduleTraits& t = schedule::traits(name);
    if (schedule::multiStage(t)) {
      const int per_rank = schedule::stagesPerRank(t, kInterleavedChunks);
      if (width < 2 || graph_.size() < width * per_rank || m % width != 0 || m < t.min_microbatches_per_rank * width)
        return;
      consider(name, b, width, [&]() -> std::optional<Candidate> {
        return Candidate{multiStagePlan(name, graph_, cluster_, width, b, m), {}, 0, 0, "balanced"};
      });
      return;
    }
    if (graph_partitioner_) exploreGraph(name, b, width);
    if (chain_partitioner_) exploreChain(name, b, width);
  }

  PartitionOptions partitionOptions(const std::string& name, int64_t b, int width) const {
    PartitionOptions po;
    po.schedule = name;
    po.microbatch_size = b;
    po.microbatches = static_cast<int>(o_.global_batch / b);
    po.max_devices = width;
    po.use_all_devices = o_.use_all_devices;
    po.max_blocks = o_.max_blocks;
    return po;
  }

  std::vector<int> replicaLimits() const {
    return o_.max_replicas == 1 ? std::vector<int>{1} : std::vector<int>{o_.max_replicas, 1};
  }

  // The graph partitioner's plans (GraphPipe's): within its budget of DP steps, on at
  // most kMaxGraphDevices devices.
  void exploreGraph(const std::string& name, int64_t b, int width) {
    if (width > kMaxGraphDevices) {
      addGraphNote("plans on more than " + std::to_string(kMaxGraphDevices) +
                   " devices come from the chain DP only: the graph search grows with the cube of the devices");
      return;
    }
    PartitionOptions po = partitionOptions(name, b, width);
    plan::ScheduleOptions schedule;
    schedule.name = name;
    for (int max_replicas : replicaLimits()) {
      po.max_replicas = max_replicas;
      if (graphStepsLeft() <= 0) {
        addGraphNote("the graph partitioner's budget of " + std::to_string(graphStepsBudget()) + " DP steps ran out" +
                     (chain_partitioner_ ? ": the other combinations' plans come from the chain DP" : ""));
        return;
      }
      // Where the down-set search ran, the tree's plan too: they price transfers
      // differently (solveGraph), and the simulator decides.
      bool every_convex_partition = false;
      for (const GraphSearch search : {GraphSearch::kAuto, GraphSearch::kSeriesParallel}) {
        if (search == GraphSearch::kSeriesParallel && !every_convex_partition) break;  // kAuto ran the tree
        consider(name, b, width, [&]() -> std::optional<Candidate> {
          std::optional<GraphPlan> found;
          try {
            if (o_.prune) {
              found = graphShared(po, schedule, search);
            } else {
              po.max_graph_steps = graphStepsLeft();
              found = partitionGraph(graph_, cluster_, po, schedule, search);
              result_.graph_search_steps += found->partition.search_steps;
            }
          } catch (const GraphSearchGaveUp&) {
            result_.graph_search_steps = graphStepsBudget();  // a search gives up on what was left
            throw;
          }
          GraphPlan& g = *found;
          every_convex_partition = g.partition.every_convex_partition;
          for (const std::string& note : g.partition.notes) addGraphNote(note);
          return Candidate{std::move(g.plan), {}, g.partition.objective, 0, "graph"};
        });
      }
    }
  }

  // The chain DP's optimum, its best pure pipeline and pure data parallelism: the DP's
  // bottleneck objective does not see the schedule's bubble, so the simulator decides.
  void exploreChain(const std::string& name, int64_t b, int width) {
    const int m = static_cast<int>(o_.global_batch / b);
    PartitionOptions po = partitionOptions(name, b, width);
    plan::ScheduleOptions schedule;
    schedule.name = name;
    const std::vector<int> replica_limits = replicaLimits();
    for (int max_replicas : replica_limits) {
      po.max_replicas = max_replicas;
      consider(name, b, width, [&]() -> std::optional<Candidate> {
        // The exhaustive search (prune off) takes no shortcut: it is the reference.
        const ChainPlan chain = o_.prune ? partitionShared(po, schedule) : partitionChain(graph_, cluster_, po, schedule);
        return Candidate{chain.plan, {}, chain.partition.objective, 0, "chain"};
      });
    }
    if (o_.max_replicas == 1 || width < 2 || m % width != 0 || !schedule::traits(name).replicable) return;
    po.max_replicas = o_.max_replicas;
    consider(name, b, width, [&]() -> std::optional<Candidate> {
      const ChainProblem problem(graph_, cluster_, po);
      if (!problem.allowedDevices(0, width)) return std::nullopt;
      const Partition all{{{0, problem.numBlocks(), 0, width}}, 0, 1};
      return Candidate{toPlan(all, problem, schedule), {}, problem.objective(all.stages), 0, "chain"};
    });
  }

  // Simulation-guided refinement (neighbours.h): from each of a few good plans that are
  // chain plans, step to the best simulated neighbour while one beats it beyond a tie,
  // each start with its share of the budget of simulations (what one leaves passes to
  // the next). Each step's plan joins the ranking.
  // Neighbours are simulated by their compute bound, best first, and only while the
  // bound can beat the best so far: the pruning of search().
  void refine() {
    std::vector<const Candidate*> order;
    for (const Candidate& c : result_.ranked) order.push_back(&c);
    std::stable_sort(order.begin(), order.end(),
                     [](const Candidate* a, const Candidate* b) { return a->report.throughput > b->report.throughput; });
    auto refinable = [&](const Candidate& c) {
      return chainRuns(c.plan, graph_, cluster_).has_value() || multiStageBounds(c.plan, graph_).has_value();
    };
    // The best of each partitioner first (a graph plan ranked below chain plans may
    // refine past them), then the next best.
    std::vector<const Candidate*> picked;
    std::set<std::string> partitioners;
    for (const Candidate* c : order)
      if (!partitioners.count(c->partitioner) && refinable(*c)) {
        partitioners.insert(c->partitioner);
        picked.push_back(c);
      }
    for (const Candidate* c : order) {
      if (picked.size() >= kRefineStarts) break;
      if (std::find(picked.begin(), picked.end(), c) == picked.end() && refinable(*c)) picked.push_back(c);
    }
    std::vector<Candidate> starts;  // copies: the walk adds to result_.ranked
    for (const Candidate* c : picked) starts.push_back(*c);
    const int total = starts.empty() ? 0 : std::min<int64_t>(kRefineSimulations, kRefineWork / simulationWork(starts.front().plan));
    int budget = 0;
    for (std::size_t k = 0; k < starts.size(); ++k) {
      Candidate& current = starts[k];
      budget += total / static_cast<int>(starts.size()) + (k == 0 ? total % static_cast<int>(starts.size()) : 0);
      while (budget > 0) {
        std::optional<Candidate> better;
        for (auto& [bound, name] : neighboursOf(current.plan)) {
          if (budget == 0 || bound <= (better ? *better : current).report.throughput * std::exp(kTie)) break;
          plan::Plan p = name();
          if (!seen_.insert(planKey(p)).second) continue;
          Candidate c{std::move(p), {}, 0, 0, "refined"};
          const double to_beat = (better ? *better : current).report.throughput;
          try {
            plan::validate(c.plan, graph_, cluster_, "candidate", std::vector<int64_t>(c.plan.numStages(), 0));
            // The compute bound ordered it; its ports may bound it lower.
            if (resourceBound(c.plan) <= to_beat * std::exp(kTie)) continue;
            --budget;
            std::optional<sim::Report> report =
                sim::predictReportAbove(graph_, cluster_, c.plan, to_beat * std::exp(kTie));
            if (!report) continue;
            c.report = std::move(*report);
          } catch (const Error&) {
            continue;  // e.g. a Program the validator refuses
          }
          if (memoryShortfall(c.report).empty() && c.report.throughput > to_beat * std::exp(kTie)) better = std::move(c);
        }
        if (!better) break;
        better->depth = schedule::pipelineDepth(plan::stageDag(better->plan, graph_));
        result_.ranked.push_back(*better);
        current = std::move(*better);
      }
    }
  }

  // The neighbours of a refinable plan (neighbours.h), each with its compute bound, best
  // bound first. A chain's are priced as runs and named as plans only when simulated.
  std::vector<std::pair<double, std::function<plan::Plan()>>> neighboursOf(const plan::Plan& plan) const {
    std::vector<std::pair<double, std::function<plan::Plan()>>> out;
    if (const std::optional<ChainRuns> runs = chainRuns(plan, graph_, cluster_)) {
      auto shell = std::make_shared<plan::Plan>(plan);
      shell->stages.clear();
      for (ChainRuns& r : neighbourRuns(plan, *runs, cluster_, o_.max_replicas))
        if (!o_.use_all_devices || r.device.back() == cluster_.size()) {
          const double bound = computeBound(*shell, r);
          out.emplace_back(bound, [this, shell, r = std::move(r)] { return planOfRuns(*shell, r, graph_, cluster_); });
        }
    } else if (const std::optional<std::vector<int>> bounds = multiStageBounds(plan, graph_)) {
      for (plan::Plan& p : multiStageNeighbours(plan, *bounds, graph_)) {
        const double bound = resourceBound(p);
        out.emplace_back(bound, [p = std::move(p)] { return p; });
      }
    }
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    return out;
  }

  // Best first: every schedule x micro-batch size x width is a combination, bounded by
  // combinationBound(), and solving it (its partitioners' DPs) yields proposals, each
  // bounded by resourceBound() at most the combination's. Whatever has the highest
  // bound is done next: a proposal is simulated, a combination solved. Once the best
  // simulated plan beats every remaining bound beyond a tie, the rest are pruned
  // unsolved and unsimulated. So a plan starved by its ports on 128 devices waits
  // behind a better-bounded one on 32, whose simulation then rules it out; the first
  // kAlwaysSimulated proposals are simulated regardless, so the ranked table has rows
  // to compare.
  void search(const std::vector<int>& widths, const std::vector<std::string>& names,
              const std::vector<int64_t>& sizes) {
    struct Combination {
      std::string name;
      int64_t b;
      int width;
      double bound;
    };
    std::vector<Combination> combinations;
    for (int width : widths)
      for (const std::string& name : names)
        for (int64_t b : sizes)
          combinations.push_back({name, b, width, sim::windowAllowance(name) * combinationBound(b, width)});
    std::stable_sort(combinations.begin(), combinations.end(),
                     [](const Combination& x, const Combination& y) { return x.bound > y.bound; });
    std::size_t next = 0;
    while (true) {
      const Proposal* top = bestProposal();
      const bool solve = next < combinations.size() && (!top || combinations[next].bound > top->bound);
      if (solve) {
        const Combination& c = combinations[next++];
        if (cannotWin(c.bound))
          ++result_.pruned_combinations;
        else
          explore(c.name, c.b, c.width);
      } else if (top) {
        evaluate(takeBestProposal());
      } else {
        break;
      }
    }
  }

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

  const Proposal* bestProposal() const { return proposals_.empty() ? nullptr : &proposals_.front(); }
  Proposal takeBestProposal() {
    std::pop_heap(proposals_.begin(), proposals_.end(), ByBound{});
    Proposal p = std::move(proposals_.back());
    proposals_.pop_back();
    return p;
  }

  // Simulates a proposal and ranks it, or records why it was dropped; one that cannot
  // win is pruned unsimulated.
  void evaluate(Proposal p) {
    if (cannotWin(p.bound)) {
      ++result_.pruned;
      return;
    }
    const double to_beat = simulated_ >= kAlwaysSimulated ? best_ * std::exp(-2 * kTie) : 0;
    ++simulated_;
    try {
      std::optional<sim::Report> report = sim::predictReportAbove(graph_, cluster_, p.candidate.plan, to_beat);
      if (!report) {
        ++result_.pruned;  // its queues bind it below the best after all
        return;
      }
      p.candidate.report = std::move(*report);
      p.drop.reason = memoryShortfall(p.candidate.report);
    } catch (const Error& e) {
      p.drop.reason = e.what();
    }
    if (!p.drop.reason.empty()) {
      result_.dropped.push_back(std::move(p.drop));
      return;
    }
    best_ = std::max(best_, p.candidate.report.throughput);
    result_.ranked.push_back(std::move(p.candidate));
  }

  // Samples/s that no simulation of the plan can exceed (sim::throughputBound): its
  // busiest rank's compute or port's traffic per mini-batch.
  double resourceBound(const plan::Plan& plan) const {
    return sim::throughputBound(sim::CostModel(graph_, cluster_, plan));
  }

  // A looser bound for `like` with the stages of a chain's runs (each device holds one
  // stage): their compute alone, from sums over the graph's layers rather than a cost
  // model of a named plan.
  double computeBound(const plan::Plan& like, const ChainRuns& runs) const {
    const std::vector<double>& work_prefix = workPrefix(like.microbatch_size);
    double slowest = 0;
    for (int s = 0; s < runs.numStages(); ++s) {
      const int first = runs.layer[s], end = runs.layer[s + 1];
      const double work = work_prefix[end] - work_prefix[first], step = step_prefix_[end] - step_prefix_[first];
      for (int d = runs.device[s]; d < runs.device[s + 1]; ++d)
        slowest = std::max(slowest, busySeconds(like, runs.device[s + 1] - runs.device[s], work, step,
                                                cluster_.device(d).speed));
    }
    return boundOf(like, slowest);
  }

  // Prefix sums over the layers of a micro-batch's F + I + W at size b ([k]: layers
  // [0, k)), the layers' times as sim::CostModel takes them (LayerGraph::secondsAt), W
  // the cheaper of the fused and the split one, as sim::throughputBound takes it.
  const std::vector<double>& workPrefix(int64_t b) const {
    std::vector<double>& prefix = work_prefix_[b];
    if (prefix.empty()) {
      prefix.push_back(0);
      for (int i = 0; i < graph_.size(); ++i) {
        const graph::PassSeconds t = graph_.secondsAt(i, b);
        prefix.push_back(prefix.back() + t.forward + t.backward_input + std::min(t.backward_weight, t.split_weight));
      }
    }
    return prefix;
  }

  // A replica's compute per mini-batch: its share of the micro-batches at `work` each,
  // one optimizer step.
  static double busySeconds(const plan::Plan& plan, int replicas, double work, double step, double speed) {
    const double share = static_cast<double>(plan.microbatches) / static_cast<double>(replicas);
    return (share * work + step) / speed;
  }

  // No plan is faster than its busiest device computes.
  static double boundOf(const plan::Plan& plan, double busiest_seconds) {
    return busiest_seconds > 0 ? sim::windowAllowance(plan.schedule.name) *
                                     static_cast<double>(plan.samplesPerMinibatch()) / busiest_seconds
                               : std::numeric_limits<double>::infinity();
  }

  // Checks a proposal once and queues it for search(), or records why not.
  void consider(const std::string& name, int64_t b, int width, const std::function<std::optional<Candidate>()>& propose) {
    Dropped drop{name, b, width, ""};
    try {
      std::optional<Candidate> proposed = propose();
      if (!proposed || !seen_.insert(planKey(proposed->plan)).second) return;
      Candidate& c = *proposed;
      drop.devices = devicesUsed(c.plan);
      if (o_.use_all_devices && drop.devices < cluster_.size()) {
        drop.reason = "leaves " + std::to_string(cluster_.size() - drop.devices) + " devices idle";
        result_.dropped.push_back(std::move(drop));
        return;
      }
      // Memory is judged later, from the schedule's footprint rather than validate's estimate.
      plan::validate(c.plan, graph_, cluster_, "candidate", std::vector<int64_t>(c.plan.numStages(), 0));
      c.depth = schedule::pipelineDepth(plan::stageDag(c.plan, graph_));
      const double bound = resourceBound(c.plan);
      proposals_.push_back({std::move(c), drop, bound, proposed_++});
      std::push_heap(proposals_.begin(), proposals_.end(), ByBound{});
      return;
    } catch (const Error& e) {
      drop.reason = e.what();
    }
    result_.dropped.push_back(std::move(drop));
  }

  const graph::LayerGraph& graph_;
  const cluster::ClusterSpec& cluster_;
  const ExploreOptions& o_;
  Exploration& result_;
  const bool graph_partitioner_, chain_partitioner_;  // which propose plans (ExploreOptions::partitioner)
  std::set<std::string> seen_;  // plans proposed so far, by planKey()
  std::vector<Proposal> proposals_;  // a heap by ByBound: the highest bound on top
  int proposed_ = 0;
  double best_ = 0;             // the best simulated throughput so far
  int simulated_ = 0;
  std::vector<double> fastest_speeds_;  // [k]: the sum of the k fastest devices' speeds
  std::vector<double> step_prefix_;  // [k]: layers [0, k) (see the constructor)
  mutable std::map<int64_t, std::vector<double>> work_prefix_;  // by micro-batch size: workPrefix()
  std::map<std::string, std::optional<Partition>> relaxed_;  // partitionShared's optima, by what they share
  std::map<std::string, std::optional<GraphPartition>> graph_relaxed_;  // graphShared's
};

}  // namespace

Exploration explore(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster, const ExploreOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  if (o.global_batch < 1) throw Error("the batch size must be at least 1 (got " + std::to_string(o.global_batch) + ")");
  Exploration result;
  result.cluster_devices = cluster.size();
  result.graph_layers = graph.size();
  Explorer explorer(graph, cluster, o, result);
  const std::vector<int> all_widths = o.use_all_devices ? std::vector<int>{cluster.size()} : widths(cluster.size());
  const std::vector<std::string> names = schedulesToExplore(o);
  for (const std::string& name : names) result.async_included |= schedule::isAsynchronous(name);
  explorer.search(all_widths, names, microbatchSizes(o));
  explorer.refine();
  // Among throughput ties (throughputTier) the larger micro-batch wins, then the leaner
  // plan. A profile prices a micro-batch as its own size scaled, so plans that differ
  // only in how the batch is cut tie (a single stage has no bubble to trade); what a
  // micro-batch costs beyond that (an action's dispatch, a smaller matrix product)
  // favours the larger: data parallelism of the 8x1024 mlp at 128 x 2 ran 6-8% faster
  // than at 64 x 4, which tied with it and won on memory (bench/ddp_comparison.sh,
  // docs/runtime.md).
  std::stable_sort(result.ranked.begin(), result.ranked.end(), [](const Candidate& a, const Candidate& b) {
    const int64_t tier_a = throughputTier(a.report), tier_b = throughputTier(b.report);
    if (tier_a != tier_b) return tier_a > tier_b;
    if (a.plan.microbatch_size != b.plan.microbatch_size) return a.plan.microbatch_size > b.plan.microbatch_size;
    return a.report.peakMemoryBytes() < b.report.peakMemoryBytes();
  });
  result.search_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (result.ranked.empty()) {
    std::string reasons;
    for (std::size_t i = 0; i < result.dropped.size() && i < 5; ++i)
      reasons += "\n  " + result.dropped[i].schedule + ", micro-batch " + std::to_string(result.dropped[i].microbatch_size) +
                 ": " + result.dropped[i].reason;
    throw Error("no plan fits this cluster for a batch of " + std::to_string(o.global_batch) + " (" +
                std::to_string(result.dropped.size()) + " combinations tried), e.g.:" + reasons);
  }
  return result;
}

}  // namespace pipetrain::planner
