// Passes over Programs: lowering to explicit communication, the forward-only Program
// that evaluation runs, and the CSV reader for user-written schedules (which goes
// through the same passes).
#pragma once

#include <string>
#include <vector>

#include "pipetrain/schedule/program.h"
#include "pipetrain/schedule/schedules.h"

namespace pipetrain::schedule {

// Adds SEND/RECV actions for every dependency between stages on different ranks: a
// RECV right before the action that needs the data (runtimes post it earlier), a SEND
// right after the action that produced it.
Program lower(const Program& compute_only);

// The forward passes of a lowered Program alone, with their communication, every one
// reading version 0 (the current weights): evaluation runs it with the same executor,
// so test batches travel through the same stages and replicas as training's.
// Dropping the backward passes keeps every rank's forwards in their order, which
// cannot introduce a deadlock.
Program forwardOnly(const Program& program);

// Reads a per-rank CSV of compute actions (row r = rank r, e.g. "0F0,0F1,0B0,0B1").
// The schedule is taken as synchronous: one mini-batch, every action reads version 0,
// each rank ends with a STEP per stage. Stages form `dag` (a chain when empty). The
// result is lowered; run validate() on it. Errors name the row and column.
Program programFromCsv(const std::string& csv_text, const std::string& origin,
                       const StageDag& dag = {});

}  // namespace pipetrain::schedule
