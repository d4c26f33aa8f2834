// The headline of a training run's report: how close the run came to its predictions,
// where each rank's step went, and the largest loss, named with what to try. The shares
// come from the run's timed actions, the records the measured Gantt chart draws (its last
// mini-batch), summed over the whole run, and the receive waits around them.
#pragma once

#include <cmath>
#include <string>
#include <vector>

namespace pipetrain::report {

// One rank's step, as shares of the time inside training steps.
struct RankShares {
  int rank = 0;
  double compute = 0;    // F, B, I, W and STEP actions
  double allreduce = 0;  // ALLREDUCE actions: waiting for the replicas' gradients
  double messages = 0;   // blocked receiving or sending activations and gradients
  double framework = 0;  // the rest: between actions
  double core_wait = -1;  // ready to run while other threads held every core, inside all of these; -1 unknown
  // The simulator's prediction from this run's own action times: the schedule's own idle
  // share (bubbles, not the all-reduce) and the all-reduce's; NaN where not predicted.
  double schedule_idle = NAN;
  double predicted_allreduce = NAN;
};

// Below this share of the step, no loss is named.
inline constexpr double kLossWorthNaming = 0.05;

// The kinds of loss a headline can name.
enum class Loss { kNone, kAllReduce, kMessages, kFramework };

// The largest loss over the ranks' mean shares, and its share of the step. Waiting for a
// core lies inside these (and compute), so the headline says it beside the largest one.
struct LargestLoss {
  Loss loss = Loss::kNone;
  double share = 0;
};
LargestLoss largestLoss(const std::vector<RankShares>& ranks);

// `measured` samples/s; `predicted` from this run's action times and `planned` from the
// profile, each <= 0 or NaN when unknown.
std::vector<std::string> runHeadline(const std::vector<RankShares>& ranks, double measured, double predicted,
                                     double planned);

// One rank's memory: what training added to the process at its peak (on the host, its
// resident set), and the planner's prediction of it.
struct RankMemory {
  int rank = 0;
  double measured = 0;
  double predicted = NAN;         // NaN: no prediction (a plan given by hand)
  double predicted_process = 0;   // of it, beyond the tensors: the framework and the dataset
  double data = -1;               // what opening the datasets added; -1: it loads none
  int learned_from_runs = 0;      // the runs the profile's framework figure is the mean of
  double heap_free = -1;          // the heap's freed and kept memory at the end; -1: not known
};

// Below this share apart, prediction and measurement agree.
inline constexpr double kMemoryAgrees = 0.10;

// A note for each rank whose measured peak and prediction lie more than kMemoryAgrees
// apart, saying by how much and what the measurement holds that the prediction did not;
// `brief`: by how much only (the console's line; the report says why).
std::vector<std::string> memoryNotes(const std::vector<RankMemory>& ranks, bool brief = false);

// Below this share apart, the run's cores computed at the profile's speed.
inline constexpr double kSpeedAgrees = 0.10;

// How fast the run's cores computed against the profile's (torch/runtime/core_probe.h):
// the seconds of one fixed computation while profiling, and on each rank during the run
// (<= 0: not measured). Where the slowest rank's core lies more than kSpeedAgrees from
// the profile's, one note saying by how much and what the planner's prediction
// (`planned` samples/s, <= 0 or NaN: none) is at that speed, as the slowest rank bounds a
// synchronous step; none otherwise.
std::vector<std::string> coreSpeedNotes(double profile_probe, const std::vector<double>& rank_probes, double planned);

}  // namespace pipetrain::report
