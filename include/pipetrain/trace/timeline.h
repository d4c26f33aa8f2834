// Timeline: what ran where and when, as predicted by the simulator or measured by the
// runtime. Both executors produce the same type, so pictures and metrics are shared.
#pragma once

#include <string>
#include <vector>

#include "pipetrain/schedule/action.h"

namespace pipetrain::trace {

struct TimedAction {
  schedule::Action action;
  double start = 0;  // seconds since the start of the run
  double end = 0;
};

// A message on the wire: from the sender's issue to its arrival at the receiver.
struct Transfer {
  schedule::Action send;  // the SEND action
  int from_rank = 0;
  int to_rank = 0;
  double start = 0;       // when it began to use the link (after any queueing)
  double end = 0;         // arrival
  double bytes = 0;
};

struct Timeline {
  std::string title;                          // e.g. "1f1b, 4 stages, 8 micro-batches"
  std::string source;                         // "simulated" or "measured"
  std::vector<std::vector<TimedAction>> ranks;  // per rank: compute, STEP and ALLREDUCE
  std::vector<Transfer> transfers;

  int numRanks() const { return static_cast<int>(ranks.size()); }
  double makespan() const;
  // Seconds rank `r` spent in compute actions (F, B, I, W, STEP).
  double busySeconds(int rank) const;
};

// One rank's actions over `minibatches` mini-batches of `microbatches` each, numbered from
// micro-batch 0: each action's mini-batch. A mini-batch runs from its first action on one
// of its micro-batches to the next one's, so a STEP or ALLREDUCE (on no micro-batch) goes
// with the mini-batch before it; actions before the first mini-batch's get -1.
std::vector<int> minibatchOfActions(const std::vector<TimedAction>& actions, int microbatches, int minibatches);

// The same actions split into their mini-batches `first` to the last (minibatchOfActions).
// Actions before mini-batch `first` are left out, and not copied.
std::vector<std::vector<TimedAction>> splitMinibatches(const std::vector<TimedAction>& actions, int microbatches,
                                                       int first, int minibatches);

// Per rank, its latest mini-batches (each rank's list ends with the same, last, one): the
// mini-batch whose span over all ranks is the median of those every rank kept, with one
// rank's actions per entry, on a time axis that starts at 0. One mini-batch alone is no
// sample: a core taken away for 10 ms made the last one of a run unlike all the others.
std::vector<std::vector<TimedAction>> typicalMinibatch(
    const std::vector<std::vector<std::vector<TimedAction>>>& recent);

}  // namespace pipetrain::trace
