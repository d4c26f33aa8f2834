// What each action of a Program does to its stage's weight versions beyond computing
// with them, read from the Program alone: the runtime's executor does it
// (torch/runtime/stage_state.h) and the simulator prices it (sim::CostModel::versionSeconds),
// both from this one reading.
#pragma once

#include <vector>

#include "pipetrain/schedule/program.h"

namespace pipetrain::schedule {

struct VersionWork {
  // F, B, I or W that reads a version older than its stage's current one on the rank
  // (2BW, PipeDream): the stashed weights are swapped in before it and back after.
  bool reads_stash = false;
  // B or I of a kLatest Program under PipeMare's T2 whose forward pass read an older
  // version: it runs on w - tau x velocity, computed first, swapped in and back.
  bool corrects = false;
  // STEP whose replaced version a later action of the rank still reads: that version is
  // copied aside first.
  bool stashes = false;
};

// What a stage's weight versions cost its actions, at speed 1.
struct StageVersionCosts {
  double swap = 0, stash = 0, correction = 0;  // over all its weights (graph::WeightVersionSeconds)
  // Calls of a B or I on its action's version (runtime::withVersion): 1, 2 where part of
  // the stage is recomputed (the layers kept, then those run again), and 1 more where it
  // recomputes, for the forward pass run again on the version its F read.
  int backward_runs = 1;
  int t2_runs = 1;  // of those, the calls on the current version, which T2 corrects
  // Whether any of it costs time (profiles from before it was measured have none).
  bool priced() const { return swap > 0 || stash > 0 || correction > 0; }
};

// The seconds `work` adds to an action of type `type` on a stage with those costs.
double versionSeconds(ActionType type, const VersionWork& work, const StageVersionCosts& costs);

// Per rank, one per position of its action list. `t2`: PipeMare's discrepancy correction
// is on (it only acts on a kLatest Program). REQUIRES: program validated.
std::vector<std::vector<VersionWork>> versionWork(const Program& program, bool t2);

}  // namespace pipetrain::schedule
