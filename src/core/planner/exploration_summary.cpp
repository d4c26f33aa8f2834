// The exploration's explanations: why the runner-up lost, what idle devices would need,
// and the JSON of the choice and the table (explore.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "explore_internal.h"
#include "pipetrain/planner/explore.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/util/text.h"

namespace pipetrain::planner {
namespace {

using detail::devicesUsed;
using detail::throughputTier;

double maxBusy(const sim::Report& r) {
  double m = 0;
  for (const auto& rank : r.ranks) m = std::max(m, rank.busy_seconds);
  return m;
}

}  // namespace

std::string whySlower(const Candidate& winner, const Candidate& loser) {
  const sim::Report &w = winner.report, &l = loser.report;
  if (throughputTier(l) == throughputTier(w)) {  // a tie on throughput: what broke it, as explore() ranks ties
    if (loser.plan.microbatch_size < winner.plan.microbatch_size)
      return "the same predicted throughput, but smaller micro-batches (" + std::to_string(loser.plan.microbatch_size) +
             " against " + std::to_string(winner.plan.microbatch_size) + ")";
    if (l.peakMemoryBytes() <= w.peakMemoryBytes() * 1.01)
      return "a tie: the same predicted throughput and peak memory (listed second)";
    return "the same predicted throughput, but a peak of " + text::humanBytes(static_cast<double>(l.peakMemoryBytes())) +
           " per device against " + text::humanBytes(static_cast<double>(w.peakMemoryBytes()));
  }
  std::string why = text::fixed(100.0 * (1.0 - l.throughput / w.throughput), 1) + "% lower throughput: ";
  if (l.bubble_fraction > w.bubble_fraction + 0.02)
    return why + "more idle time (mean bubble " + text::fixed(l.bubble_fraction, 3) + " vs " +
           text::fixed(w.bubble_fraction, 3) + ")";
  if (maxBusy(l) * l.samples_per_minibatch > maxBusy(w) * w.samples_per_minibatch * 1.02)
    return why + "a slower bottleneck rank (" + text::fixed(maxBusy(l) / l.samples_per_minibatch * 1e3, 3) + " vs " +
           text::fixed(maxBusy(w) / w.samples_per_minibatch * 1e3, 3) + " ms busy per sample)";
  return why + "communication and synchronisation (iteration " + text::fixed(l.iteration_time * 1e3, 2) + " vs " +
         text::fixed(w.iteration_time * 1e3, 2) + " ms per " + std::to_string(l.samples_per_minibatch) + " samples)";
}

bool isDataParallel(const plan::Plan& plan) {
  return plan.numStages() == 1 && !schedule::isAsynchronous(plan.schedule.name);
}

bool sameDataParallelRun(const plan::Plan& a, const plan::Plan& b) {
  return isDataParallel(a) && isDataParallel(b) && a.stages[0].devices == b.stages[0].devices &&
         a.microbatch_size == b.microbatch_size && a.microbatches == b.microbatches;
}

std::string Exploration::runnerUpLost() const {
  for (std::size_t i = 1; i < ranked.size(); ++i) {
    if (sameDataParallelRun(ranked[0].plan, ranked[i].plan)) continue;
    if (ranked[i].report.throughput > ranked[0].report.throughput)  // chosen within the noise
      return "predicted " + text::format("%.1f%%", 100 * (ranked[i].report.throughput / ranked[0].report.throughput - 1)) +
             " faster, within the profile's noise (" + text::format("%.0f%%", 100 * noise) +
             "): the chosen plan's shape is preferred among equals";
    return whySlower(ranked[0], ranked[i]);
  }
  return "";
}

std::string Exploration::noiseNote() const {
  if (within_noise < 2) return "";
  std::string note = std::to_string(within_noise) + " plans are predicted within the profile's noise (" +
                     text::format("%.0f%%", 100 * noise) + ") of the best";
  if (best_predicted > 0) note += text::format(" (%.6g samples/s)", best_predicted);
  return note + ": among them the larger micro-batch is chosen, then fewer stages, fewer devices, less memory, "
                "so that profiling again chooses the same plan";
}

std::string Exploration::idleDevicesNote() const {
  if (ranked.empty()) return "";
  const plan::Plan& p = best().plan;
  const int used = devicesUsed(p);
  if (used >= cluster_devices) return "";
  std::string note = "the chosen plan uses " + std::to_string(used) + " of the cluster's " +
                     std::to_string(cluster_devices) + " devices";
  for (std::size_t i = 1; i < ranked.size(); ++i)
    if (devicesUsed(ranked[i].plan) == cluster_devices)
      return note + "; the best plan on all of them (#" + std::to_string(i + 1) + ") was predicted slower";
  // No candidate used them all. A plan of s stages x r replicas does when s * r = D and
  // r replicas can split the micro-batches: find the nearest such count m'. (Under a
  // per-mini-batch step m' >= r will do; PipeDream's per-round step needs r | m'.)
  const int m = p.microbatches;
  const schedule::ScheduleTraits& traits = schedule::traits(p.schedule.name);
  int best_m = 0, best_stages = 0;
  for (int stages = 1; stages <= std::min(cluster_devices, graph_layers); ++stages) {
    if (cluster_devices % stages != 0) continue;
    const int r = cluster_devices / stages;
    const int down = m / r * r, up = down + r;
    for (int candidate : {std::max(m, r), down, up})
      if (schedule::replicasCanSplit(traits, candidate, r) &&
          (best_m == 0 || std::abs(candidate - m) < std::abs(best_m - m))) {
        best_m = candidate;
        best_stages = stages;
      }
  }
  const std::string idle = std::to_string(cluster_devices - used) + " sit idle";
  if (best_m == m)  // the numbers allow it: the partitioner's plans on every device were no faster
    return note + ": " + idle + "; the partitioner found no plan on all of them that it predicts faster";
  note += ": " + idle + ", and no plan could use them all with " +
          std::to_string(m) + " micro-batches per mini-batch (" + p.schedule.name +
          (traits.step_rule == schedule::StepRule::kPerMinibatch
               ? ": every replica needs a micro-batch of its own"
               : ": a stage's replicas must divide the micro-batches") + ")";
  if (best_m > 0)
    note += "; " + std::to_string(best_m) + " micro-batches (a batch of " + std::to_string(best_m * p.microbatch_size) +
            ") would let " + std::to_string(best_stages) + " stage(s) x " +
            std::to_string(cluster_devices / best_stages) + " replicas use every device";
  return note;
}

CalibrationFigures Exploration::calibrationFigures() const {
  return {target_loss, calibration_samples, calibration_noise, rules_measured, rules_cached, plans_bounded,
          rules_over_budget};
}

json_io::Json CalibrationFigures::toJson() const {
  return {{"target_loss", target_loss},       {"samples_per_rule", samples_per_rule},
          {"noise", noise},                   {"rules_measured", rules_measured},
          {"rules_cached", rules_cached},     {"plans_bounded", plans_bounded},
          {"rules_over_budget", rules_over_budget}};
}

CalibrationFigures CalibrationFigures::fromJson(const json_io::JsonCursor& c) {
  return {c.numberOr("target_loss", 0),
          c.intOr("samples_per_rule", 0),
          c.numberOr("noise", 0),
          static_cast<int>(c.intOr("rules_measured", 0)),
          static_cast<int>(c.intOr("rules_cached", 0)),
          static_cast<int>(c.intOr("plans_bounded", 0)),
          static_cast<int>(c.intOr("rules_over_budget", 0))};
}

json_io::Json Exploration::candidateJson(const Candidate& c) const {
  json_io::Json stages = json_io::Json::array();
  for (const auto& s : c.plan.stages)
    stages.push_back({{"layers", s.layers},
                      {"replicas", s.devices.size()},
                      {"devices", s.devices},
                      {"recompute", s.recompute},
                      {"recomputed_layers", s.recomputedLayers()}});
  json_io::Json memory = json_io::Json::object();
  for (const auto& r : c.report.ranks) memory[r.device] = std::max<int64_t>(memory.value(r.device, int64_t{0}), r.peak_memory_bytes);
  json_io::Json j{{"name", planName(c.plan)},
                  {"schedule", c.plan.schedule.name},
                  {"partitioner", c.partitioner},
                  {"depth", c.depth},
                  {"chunks", c.plan.schedule.chunks},
                  {"asynchronous", schedule::isAsynchronous(c.plan.schedule.name)},
                  {"stages", stages},
                  {"microbatch_size", c.plan.microbatch_size},
                  {"microbatches", c.plan.microbatches},
                  {"predicted_throughput", c.report.throughput},
                  {"predicted_iteration_seconds", c.report.iteration_time},
                  {"bubble_fraction", c.report.bubble_fraction},
                  {"peak_memory_bytes", memory}};
  objective->addCandidateJson(c, j);
  return j;
}

json_io::Json Exploration::toJson() const {
  json_io::Json j = candidateJson(best());
  j["search_seconds"] = search_seconds;
  j["pruned"] = pruned;
  j["pruned_combinations"] = pruned_combinations;
  j["async_included"] = async_included;
  if (below_timed_batch > 0) j["below_timed_batch"] = below_timed_batch;
  j["runner_up_lost"] = runnerUpLost();
  j["noise_note"] = noiseNote();
  j["idle_devices_note"] = idleDevicesNote();
  j["graph_notes"] = graph_notes;
  j["objective"] = objective->name();
  j["ranking_notes"] = ranking_notes;
  objective->addJson(*this, j);
  json_io::Json table = json_io::Json::array();
  for (const auto& c : ranked) table.push_back(candidateJson(c));
  j["candidates"] = table;
  json_io::Json drops = json_io::Json::array();
  for (const auto& d : dropped)
    drops.push_back({{"schedule", d.schedule}, {"microbatch_size", d.microbatch_size}, {"devices", d.devices}, {"reason", d.reason}});
  j["dropped"] = drops;
  return j;
}

}  // namespace pipetrain::planner
