#include "pipetrain/report/run_headline.h"

#include <algorithm>
#include <cstdio>

#include "pipetrain/util/text.h"

namespace pipetrain::report {
namespace {

std::string percent(double fraction) { return text::format("%.0f%%", 100 * fraction); }

// The ranks' mean shares; a share unknown on any rank stays unknown (NaN, or -1 for the
// core wait).
RankShares mean(const std::vector<RankShares>& ranks) {
  RankShares m;
  m.schedule_idle = m.predicted_allreduce = 0;
  m.core_wait = 0;
  for (const RankShares& r : ranks) {
    m.compute += r.compute, m.allreduce += r.allreduce, m.messages += r.messages, m.framework += r.framework;
    m.schedule_idle += r.schedule_idle, m.predicted_allreduce += r.predicted_allreduce;
    m.core_wait = m.core_wait < 0 || r.core_wait < 0 ? -1 : m.core_wait + r.core_wait;
  }
  const double n = static_cast<double>(ranks.size());
  m.compute /= n, m.allreduce /= n, m.messages /= n, m.framework /= n, m.schedule_idle /= n, m.predicted_allreduce /= n;
  if (m.core_wait >= 0) m.core_wait /= n;
  return m;
}

// Waiting for messages beyond what the schedule itself leaves idle.
double extraMessages(const RankShares& m) {
  return std::max(0.0, m.messages - (std::isfinite(m.schedule_idle) ? m.schedule_idle : 0.0));
}

}  // namespace

LargestLoss largestLoss(const std::vector<RankShares>& ranks) {
  if (ranks.empty()) return {};
  const RankShares m = mean(ranks);
  LargestLoss best;
  for (const auto& [loss, share] :
       {std::pair{Loss::kAllReduce, m.allreduce}, {Loss::kMessages, extraMessages(m)}, {Loss::kFramework, m.framework}})
    if (share > best.share) best = {loss, share};
  return best.share > kLossWorthNaming ? best : LargestLoss{};
}

std::vector<std::string> runHeadline(const std::vector<RankShares>& ranks, double measured, double predicted,
                                     double planned) {
  std::vector<std::string> notes;
  std::string reached = text::format("Measured %.1f samples/s", measured);
  if (predicted > 0)
    reached += ": " + percent(measured / predicted) + " of the prediction from this run's own action times";
  if (planned > 0)
    reached += (predicted > 0 ? ", " : ": ") + percent(measured / planned) + " of the planner's from the profile";
  notes.push_back(reached + ".");
  if (ranks.empty()) return notes;
  const RankShares m = mean(ranks);
  std::string went = "Of each rank's step, on average: compute " + percent(m.compute);
  if (m.allreduce > 0 || m.predicted_allreduce > 0) {
    went += ", the gradients' all-reduce " + percent(m.allreduce);
    if (std::isfinite(m.predicted_allreduce))
      went += " (predicted from this run: " + percent(m.predicted_allreduce) + ")";
  }
  went += ", waiting for messages " + percent(m.messages);
  if (std::isfinite(m.schedule_idle))
    went += " (the schedule's own idle time, predicted from this run: " + percent(m.schedule_idle) + ")";
  went += ", framework " + percent(m.framework);
  if (m.core_wait >= 0) went += "; waiting for a CPU core, inside all of these: " + percent(m.core_wait);
  notes.push_back(went + ".");

  const LargestLoss largest = largestLoss(ranks);
  switch (largest.loss) {
    case Loss::kAllReduce:
      notes.push_back("The largest loss is the all-reduce of the replicas' gradients (" + percent(largest.share) +
                      "): more samples per replica amortise it, or fewer replicas and more pipeline stages avoid it.");
      break;
    case Loss::kMessages:
      notes.push_back("The largest loss is waiting for messages beyond the schedule's own idle time (" +
                      percent(largest.share) +
                      "): the network or the transport is slower than the plan assumed; profile-network measures it.");
      break;
    case Loss::kFramework:
      notes.push_back("The largest loss is the framework, time neither computing nor waiting (" +
                      percent(largest.share) + "): more work per action (a larger micro-batch) amortises it.");
      break;
    case Loss::kNone: break;
  }
  // It lies inside the losses above (and inside compute): said beside them, not instead.
  if (m.core_wait > kLossWorthNaming)
    notes.push_back("Inside these, waiting for a CPU core took " + percent(m.core_wait) +
                    " of the step: the ranks and their threads, or other processes, outnumber the cores. Fewer ranks "
                    "would give each its own.");
  const auto busiest = std::max_element(ranks.begin(), ranks.end(),
                                        [](const RankShares& a, const RankShares& b) { return a.compute < b.compute; });
  notes.push_back("The busiest rank is rank " + std::to_string(busiest->rank) + ", computing " +
                  percent(busiest->compute) + " of its step: the bottleneck stage lives there.");
  return notes;
}

std::vector<std::string> coreSpeedNotes(double profile_probe, const std::vector<double>& rank_probes,
                                        double planned) {
  const auto slowest = std::max_element(rank_probes.begin(), rank_probes.end());
  if (!(profile_probe > 0) || slowest == rank_probes.end() || !(*slowest > 0)) return {};
  const double slower = *slowest / profile_probe;
  if (std::abs(slower - 1) <= kSpeedAgrees) return {};
  char line[320];
  std::snprintf(line, sizeof line,
                "The cores computed %.2fx %s than while the profile was taken: one fixed computation took %.2f ms on "
                "the slowest rank's core (rank %d) against %.2f ms then.",
                slower > 1 ? slower : 1 / slower, slower > 1 ? "slower" : "faster", 1e3 * *slowest,
                static_cast<int>(slowest - rank_probes.begin()), 1e3 * profile_probe);
  std::string note = line;
  if (planned > 0) {
    std::snprintf(line, sizeof line, " At that speed the planner's prediction is %.1f samples/s (planned: %.1f).",
                  planned / slower, planned);
    note += line;
  }
  return {note};
}

std::vector<std::string> memoryNotes(const std::vector<RankMemory>& ranks, bool brief) {
  std::vector<std::string> notes;
  for (const RankMemory& r : ranks) {
    if (!(r.predicted > 0) || std::abs(r.measured / r.predicted - 1) <= kMemoryAgrees) continue;
    const double apart = r.measured / r.predicted - 1;
    std::string note = "Rank " + std::to_string(r.rank) + "'s peak memory, " + text::humanBytes(r.measured) +
                       " added by training, is " + percent(std::abs(apart)) + (apart > 0 ? " above" : " below") +
                       " the planner's prediction (" + text::humanBytes(r.predicted) + ", of which " +
                       text::humanBytes(r.predicted_process) + " beyond its tensors)";
    if (brief) {
      notes.push_back(note);
      continue;
    }
    if (r.data >= 0) note += "; opening its datasets added " + text::humanBytes(r.data);
    // Memory the tensors' accounting cannot see: what the heap freed and kept, which at
    // the peak partly held the passing tensors the prediction prices, and partly lay in
    // gaps between blocks still in use.
    if (apart > 0 && r.heap_free >= 0)
      note += "; at its end the heap kept " + text::humanBytes(r.heap_free) +
              " freed for reuse (the allocator keeps what training freed, and gaps between blocks in use)";
    note += r.learned_from_runs > 0
                ? ". The profile's figure for the framework is the mean of " + std::to_string(r.learned_from_runs) +
                      " earlier run(s); this run's joins it for the next plan."
                : ". Before a run, the profile knows of the process beyond its tensors only the dataset, the "
                  "LibTorch code its passes paged in, the workspaces its kernels touched, and on a CPU a share of "
                  "the tensors the heap keeps freed beside them; the rest (the kernels' passing buffers, the whole "
                  "model as every rank builds it) this run taught it, and the next plan prices it.";
    notes.push_back(note);
  }
  return notes;
}

}  // namespace pipetrain::report
