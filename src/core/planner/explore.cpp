#include "pipetrain/planner/explore.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "explorer.h"
#include "pipetrain/cluster/chain_order.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/schedule/schedules.h"
#include "pipetrain/util/error.h"

namespace pipetrain::planner {

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

std::string planName(const plan::Plan& plan) {
  const std::string recomputed = plan::recomputedStages(plan);
  const auto count =
      std::count_if(plan.stages.begin(), plan.stages.end(), [](const plan::Stage& s) { return s.recompute; });
  const std::string recomputing = recomputed.empty()    ? ""
                                  : recomputed == "all" ? ", recomputing activations"
                                                        : (count == 1 ? ", stage " : ", stages ") + recomputed +
                                                              " recomputing activations";
  if (isDataParallel(plan))
    return "data parallelism on " + std::to_string(plan.stages[0].devices.size()) + " devices (" +
           plan.schedule.name + "'s order of passes" + recomputing + ")";
  return plan.schedule.name + ", " + std::to_string(plan.numStages()) + " stages (" + plan::stageShape(plan) + ")" +
         recomputing;
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

// Among plans the profile's noise cannot tell apart, the preferred shape: the larger
// micro-batch (fewer actions, whose cost the profile does not see), then fewer stages
// (fewer messages), fewer devices, less memory; then the ranking's order.
bool choiceOrder(const Candidate& a, const Candidate& b) {
  if (a.plan.microbatch_size != b.plan.microbatch_size) return a.plan.microbatch_size > b.plan.microbatch_size;
  if (a.plan.numStages() != b.plan.numStages()) return a.plan.numStages() < b.plan.numStages();
  if (detail::devicesUsed(a.plan) != detail::devicesUsed(b.plan))
    return detail::devicesUsed(a.plan) < detail::devicesUsed(b.plan);
  return a.report.peakMemoryBytes() < b.report.peakMemoryBytes();
}

// Moves the preferred plan among those within `noise` of the best prediction to the front.
void chooseWithinNoise(Exploration& e, double noise) {
  e.noise = noise;
  const double floor = e.ranked.front().report.throughput * (1 - noise);
  auto end = e.ranked.begin();
  while (end != e.ranked.end() && end->report.throughput >= floor) ++end;
  e.within_noise = 0;  // distinct runs: data parallelism once, whatever its schedules
  for (auto it = e.ranked.begin(); it != end; ++it)
    e.within_noise += std::none_of(e.ranked.begin(), it, [&](const Candidate& c) { return sameDataParallelRun(c.plan, it->plan); });
  const auto chosen = std::min_element(e.ranked.begin(), end, choiceOrder);  // the first of equals: ranking order
  if (chosen == e.ranked.begin()) return;
  e.best_predicted = e.ranked.front().report.throughput;
  std::rotate(e.ranked.begin(), chosen, chosen + 1);
}

}  // namespace

Exploration explore(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster, const ExploreOptions& o,
                    const ObjectiveInputs& inputs) {
  const auto start = std::chrono::steady_clock::now();
  if (o.global_batch < 1) throw Error("the batch size must be at least 1 (got " + std::to_string(o.global_batch) + ")");
  if (!(o.noise >= 0 && o.noise < 0.5)) throw Error("the profile's noise must be a fraction in [0, 0.5)");
  if (o.objective->needsCalibrator() && !inputs.calibrator)
    throw Error(std::string("internal: the ") + o.objective->name() +
                " objective ranks by update rules' loss curves, and no calibrator was given to measure them");
  Exploration result;
  result.cluster_devices = cluster.size();
  result.graph_layers = graph.size();
  // Stages are laid over consecutive devices: slow links go to the chain's end. Plans
  // name their devices, so they mean the same on `cluster` as on this order of it.
  const cluster::ClusterSpec chain = cluster::chainOrder(cluster);
  detail::Explorer explorer(graph, chain, o, result);
  const std::vector<int> all_widths =
      o.use_all_devices ? std::vector<int>{cluster.size()} : detail::widths(cluster.size());
  const std::vector<std::string> names = schedulesToExplore(o);
  for (const std::string& name : names) result.async_included |= schedule::isAsynchronous(name);
  const int64_t timed = graph.smallestTimedBatch();
  const std::vector<int64_t> sizes = detail::microbatchSizes(o, timed);
  if (!sizes.empty()) explorer.search(all_widths, names, sizes);
  // Under auto, a plan that fits only by recomputing competes with those that fit by
  // smaller micro-batches instead, which `none` would have found: auto searches what
  // none and full search (the recompute bench's gpt at 900 MB a device, where none's
  // smaller micro-batch beat auto's recomputing one: docs/planner.md, "Recomputation").
  const bool recomputed = std::any_of(result.ranked.begin(), result.ranked.end(), [](const Candidate& c) {
    return std::any_of(c.plan.stages.begin(), c.plan.stages.end(), [](const plan::Stage& s) { return s.recompute; });
  });
  const bool memory_binds = result.ranked.empty() || (o.recompute == Recompute::kAuto && recomputed);
  if (memory_binds && o.microbatch_sizes.empty()) {
    // Where memory binds, micro-batches smaller than the profile timed are the way to fit.
    // Their times scale in proportion from its smallest (optimistic), and the notes say so.
    const std::vector<int64_t> smaller = detail::smallerMicrobatchSizes(o, timed);
    if (!smaller.empty()) {
      result.below_timed_batch = timed;
      explorer.search(all_widths, names, smaller);
    }
  }
  if (sizes.empty() && result.below_timed_batch == 0) detail::throwUnservable(o);
  explorer.refine();
  explorer.recomputeLess();
  // Among throughput ties (throughputTier) the larger micro-batch wins, then the leaner
  // plan. A profile prices a micro-batch as its own size scaled, so plans that differ
  // only in how the batch is cut tie (a single stage has no bubble to trade); what a
  // micro-batch costs beyond that (an action's dispatch, a smaller matrix product)
  // favours the larger: data parallelism of the 8x1024 mlp at 128 x 2 ran faster than at
  // 64 x 4, which tied with it and won on memory (bench/ddp_comparison.sh; measured:
  // docs/planner.md, "The exploration: BaPipe's joint choice").
  using detail::throughputTier;
  std::stable_sort(result.ranked.begin(), result.ranked.end(), [](const Candidate& a, const Candidate& b) {
    const int64_t tier_a = throughputTier(a.report), tier_b = throughputTier(b.report);
    if (tier_a != tier_b) return tier_a > tier_b;
    if (a.plan.microbatch_size != b.plan.microbatch_size) return a.plan.microbatch_size > b.plan.microbatch_size;
    return a.report.peakMemoryBytes() < b.report.peakMemoryBytes();
  });
  if (!result.ranked.empty() && o.noise > 0) chooseWithinNoise(result, o.noise);
  if (result.ranked.empty()) {
    // The smallest micro-batches first (the nearest to fitting), each reason once: the
    // same refusal for two widths is one line.
    std::vector<const Dropped*> by_size;
    for (const Dropped& d : result.dropped) by_size.push_back(&d);
    std::stable_sort(by_size.begin(), by_size.end(),
                     [](const Dropped* a, const Dropped* b) { return a->microbatch_size < b->microbatch_size; });
    std::string reasons;
    std::set<std::string> said;
    for (const Dropped* d : by_size) {
      const std::string line = "\n  " + d->schedule + ", micro-batch " + std::to_string(d->microbatch_size) + ": " + d->reason;
      if (said.size() < 5 && said.insert(line).second) reasons += line;
    }
    throw Error("no plan fits this cluster for a batch of " + std::to_string(o.global_batch) + " (" +
                std::to_string(result.dropped.size()) + " combinations tried), e.g.:" + reasons);
  }
  // The objective's time counts as the planner's, not the training a calibrator does for it.
  o.objective->rank(result, graph, inputs);
  result.search_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() - result.calibration_seconds;
  return result;
}

}  // namespace pipetrain::planner
