#include "explorer.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <map>
#include <set>

#include "pipetrain/graph/series_parallel.h"
#include "pipetrain/plan/plan_program.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/schedule/schedules.h"
#include "pipetrain/sim/throughput_bound.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/parallel.h"
#include "pipetrain/util/text.h"

namespace pipetrain::planner::detail {
namespace {

// Proposals simulated before any is pruned by its bound.
constexpr int kAlwaysSimulated = 5;
// Pruned proposals kept for the walks to start from (keepPruned()).
constexpr std::size_t kPrunedKept = 64;
// Proposals simulated at once (evaluateBest).
constexpr std::size_t kEvaluationBatch = 4;
}  // namespace

void Explorer::rank(Candidate c) {
  ranked_at_[planKey(c.plan)] = result_.ranked.size();
  result_.ranked.push_back(std::move(c));
}

// The rank that misses its memory most, or "" when all fit.
std::string memoryShortfall(const sim::Report& r) {
  for (const auto& rank : r.ranks)
    if (rank.peak_memory_bytes > rank.memory_capacity_bytes)
      return "needs " + text::humanBytes(static_cast<double>(rank.peak_memory_bytes)) + " on " + rank.device +
             ", which has " + text::humanBytes(static_cast<double>(rank.memory_capacity_bytes));
  return "";
}

}  // namespace pipetrain::planner::detail

namespace pipetrain::planner {

std::string tiedLayersApart(const plan::Plan& plan, const std::vector<std::vector<std::string>>& tied_layers) {
  if (!schedule::isAsynchronous(plan.schedule.name) || plan.numStages() == 1) return "";
  std::map<std::string, int> stage_of;
  for (int s = 0; s < plan.numStages(); ++s)
    for (const std::string& layer : plan.stages[s].layers) stage_of[layer] = s;
  for (const auto& group : tied_layers) {
    std::set<int> stages;
    for (const std::string& layer : group)
      if (auto it = stage_of.find(layer); it != stage_of.end()) stages.insert(it->second);
    if (stages.size() > 1) {
      std::string names;
      for (const std::string& layer : group) names += (names.empty() ? "'" : ", '") + layer + "'";
      return "layers " + names + " share a weight and would sit on different stages, which " + plan.schedule.name +
             " would let drift apart";
    }
  }
  return "";
}

}  // namespace pipetrain::planner

namespace pipetrain::planner::detail {

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

Explorer::Explorer(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster, const ExploreOptions& o,
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
double Explorer::combinationBound(int64_t b, int width) const {
  const double microbatches = static_cast<double>(o_.global_batch / b);
  const double work = microbatches * workPrefix(b).back() + step_prefix_.back();
  return work > 0 ? static_cast<double>(o_.global_batch) * fastest_speeds_[width] / work
                  : std::numeric_limits<double>::infinity();
}

// The throughput the best plan of a family beat by a tie: 0 until pruning starts.
double Explorer::barOf(const std::string& family) const {
  if (!o_.prune || simulated_ < kAlwaysSimulated) return 0;
  const auto it = best_.find(family);
  return it == best_.end() ? 0 : it->second * std::exp(-2 * kTie) * (1 - o_.noise);
}

// The throughput a plan of this schedule, shape and micro-batch size must beat to
// matter, as the objective judges it.
double Explorer::toBeat(const std::string& schedule, bool single_stage, int64_t microbatch_size) const {
  return o_.objective->toBeat([this](const std::string& family) { return barOf(family); }, schedule, single_stage,
                              microbatch_size, o_.global_batch);
}

// Whether a combination of that bound cannot beat the best plans simulated so far: of
// either family its plans may fall in.
bool Explorer::cannotWin(double bound, const std::string& schedule, int64_t microbatch_size) const {
  return bound < std::min(toBeat(schedule, true, microbatch_size), toBeat(schedule, false, microbatch_size));
}

void Explorer::recomputeAsAsked(plan::Plan& plan) const {
  if (o_.recompute == Recompute::kFull)
    for (plan::Stage& s : plan.stages) s.recompute = true;
}

std::optional<sim::Report> Explorer::simulate(plan::Plan& plan, double to_beat) const {
  std::optional<sim::Report> report = sim::predictReportAbove(graph_, cluster_, plan, to_beat);
  if (!report || o_.recompute != Recompute::kAuto || memoryShortfall(*report).empty() ||
      schedule::traits(plan.schedule.name).backward_weights == schedule::BackwardWeights::kLatest)
    return report;
  std::set<std::string> short_devices;
  for (const sim::RankReport& rank : report->ranks)
    if (rank.peak_memory_bytes > rank.memory_capacity_bytes) short_devices.insert(rank.device);
  plan::Plan recomputing = plan;
  for (plan::Stage& s : recomputing.stages)
    for (const std::string& d : s.devices) s.recompute = s.recompute || short_devices.count(d) > 0;
  std::optional<sim::Report> again = sim::predictReportAbove(graph_, cluster_, recomputing, to_beat);
  if (again) plan = std::move(recomputing);
  return again;
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
void Explorer::search(const std::vector<int>& widths, const std::vector<std::string>& names,
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
      if (cannotWin(c.bound, c.name, c.b))
        ++result_.pruned_combinations;
      else
        explore(c.name, c.b, c.width);
    } else if (top) {
      evaluateBest(next < combinations.size() ? combinations[next].bound : 0);
    } else {
      break;
    }
  }
}

// A pruned proposal, kept for a fixed schedule's walks to start from (refine.cpp,
// addSpareStarts) while fewer than kPrunedKept are: proposals are popped best bound
// first, so these are the best-bounded. Under auto the spares found no better plan on the
// published profiles and took up to half of a search's time (docs/planner.md, "Bounds
// that count the fill and drain").
void Explorer::keepPruned(Candidate c) {
  if (o_.schedule != "auto" && pruned_proposals_.size() < kPrunedKept) pruned_proposals_.push_back(std::move(c));
}

Explorer::Proposal Explorer::takeBestProposal() {
  std::pop_heap(proposals_.begin(), proposals_.end(), ByBound{});
  Proposal p = std::move(proposals_.back());
  proposals_.pop_back();
  return p;
}

// Simulates the best proposals and ranks them, or records why they were dropped; one
// that cannot win is pruned unsimulated. Up to kEvaluationBatch proposals whose bounds
// are above the next combination's (so the search stays best first) are simulated at
// once, on as many threads as the machine has cores, each against the bar as it stood
// before the batch: a proposal the batch ahead of it would have ruled out may be
// simulated too, but only below that bar, where it cannot change the choice. The batch
// is a constant, not the core count, so every machine ranks the same plans.
void Explorer::evaluateBest(double next_combination_bound) {
  struct Simulation {
    Proposal proposal;
    double to_beat = 0;
    std::optional<sim::Report> report;  // none: pruned by its queues, or refused
    std::optional<std::string> error;   // the schedule's refusal
    std::exception_ptr failure;  // anything but a schedule's refusal, rethrown here
  };
  std::vector<Simulation> batch;
  // The first is the one the search chose over the next combination.
  for (bool first = true; bestProposal() && batch.size() < kEvaluationBatch &&
                          (first || bestProposal()->bound > next_combination_bound);
       first = false) {
    Proposal p = takeBestProposal();
    const plan::Plan& proposed = p.candidate.plan;
    p.drop.reason = tiedLayersApart(proposed, o_.tied_layers);
    if (!p.drop.reason.empty()) {
      result_.dropped.push_back(std::move(p.drop));
      continue;
    }
    const double to_beat = toBeat(proposed.schedule.name, proposed.numStages() == 1, proposed.microbatch_size);
    if (p.bound < to_beat) {
      ++result_.pruned;
      keepPruned(std::move(p.candidate));
      continue;
    }
    ++simulated_;
    batch.push_back({std::move(p), to_beat, std::nullopt, std::nullopt, nullptr});
  }
  util::parallelFor(batch.size(), [&](std::size_t i) {
    Simulation& s = batch[i];
    try {
      s.report = simulate(s.proposal.candidate.plan, s.to_beat);
    } catch (const Error& e) {
      s.error = e.what();
    } catch (...) {
      s.failure = std::current_exception();
    }
  });
  for (Simulation& s : batch) {
    if (s.failure) std::rethrow_exception(s.failure);
    Proposal& p = s.proposal;
    if (s.error) {  // dropped even where the refusal says nothing
      p.drop.reason = *s.error;
      result_.dropped.push_back(std::move(p.drop));
      continue;
    }
    if (!s.report) {
      ++result_.pruned;  // its queues bind it below the best after all
      keepPruned(std::move(p.candidate));
      continue;
    }
    p.candidate.report = std::move(*s.report);
    p.drop.reason = memoryShortfall(p.candidate.report);
    if (!p.drop.reason.empty()) {
      result_.dropped.push_back(std::move(p.drop));
      continue;
    }
    const plan::Plan& plan = p.candidate.plan;
    double& best = best_[o_.objective->family(plan.schedule.name, plan.numStages() == 1, plan.microbatch_size)];
    best = std::max(best, p.candidate.report.throughput);
    rank(std::move(p.candidate));
  }
}

// Samples/s that no simulation of the plan can exceed (sim::throughputBound): its
// busiest rank's compute or port's traffic per mini-batch.
double Explorer::resourceBound(const plan::Plan& plan) const {
  return sim::throughputBound(sim::CostModel(graph_, cluster_, plan));
}

// A looser bound for `like` with the stages of a chain's runs (each device holds one
// stage): their compute alone, from sums over the graph's layers rather than a cost
// model of a named plan.
double Explorer::computeBound(const plan::Plan& like, const ChainRuns& runs) const {
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
const std::vector<double>& Explorer::workPrefix(int64_t b) const {
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
double Explorer::busySeconds(const plan::Plan& plan, int replicas, double work, double step, double speed) {
  const double share = static_cast<double>(plan.microbatches) / static_cast<double>(replicas);
  return (share * work + step) / speed;
}

// No plan is faster than its busiest device computes.
double Explorer::boundOf(const plan::Plan& plan, double busiest_seconds) {
  return busiest_seconds > 0 ? sim::windowAllowance(plan.schedule.name) *
                                   static_cast<double>(plan.samplesPerMinibatch()) / busiest_seconds
                             : std::numeric_limits<double>::infinity();
}

}  // namespace pipetrain::planner::detail
