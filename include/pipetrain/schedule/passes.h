// Passes over Programs: lowering to explicit communication, and the forward-only Program
// that evaluation runs. (Users' CSV schedules go through the same passes: csv_schedule.h.)
#pragma once

#include <string>
#include <vector>

#include "pipetrain/schedule/program.h"
#include "pipetrain/schedule/schedules.h"

namespace pipetrain::schedule {

// Adds SEND/RECV actions for every dependency between stages on different ranks: a
// RECV right before the action that needs the data (runtimes post it earlier), a SEND
// right after the action that produced it. Then each rank's receives from one sender
// follow that sender's order, as a channel that pairs messages by order (NCCL) needs: a
// RECV whose message is sent before one this rank waits for earlier moves up to that
// wait (which costs no time: it has arrived by then).
Program lower(Program compute_only);

// The forward passes of a lowered Program alone, with their communication, every one
// reading version 0 (the current weights): evaluation runs it with the same executor,
// so test batches travel through the same stages and replicas as training's.
// Dropping the backward passes keeps every rank's forwards in their order, which
// cannot introduce a deadlock.
Program forwardOnly(const Program& program);

}  // namespace pipetrain::schedule
