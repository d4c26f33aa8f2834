// Passes over Programs: replication and lowering to explicit communication, plus the
// CSV reader for user-written schedules (which goes through the same passes).
#pragma once

#include <string>
#include <vector>

#include "pipetrain/schedule/program.h"
#include "pipetrain/schedule/schedules.h"

namespace pipetrain::schedule {

// Runs each rank of `program` on `copies[r]` ranks (data-parallel replicas). Replica k
// of a rank keeps the micro-batches j with j % copies == k, in the original order
// (dropping ordering constraints cannot introduce a deadlock), and every STEP of a
// replicated stage is preceded by an ALLREDUCE of its gradients. New ranks are
// numbered in order: rank 0's copies first.
// Throws Error for a schedule that steps after every micro-batch (pipedream), whose
// replicas would need a different update rule, and when m is not a multiple of copies.
Program replicate(const Program& program, const std::vector<int>& copies);

// Adds SEND/RECV actions for every dependency between stages on different ranks: a
// RECV right before the action that needs the data (runtimes post it earlier), a SEND
// right after the action that produced it.
Program lower(const Program& compute_only);

// Reads a per-rank CSV of compute actions (row r = rank r, e.g. "0F0,0F1,0B0,0B1").
// The schedule is taken as synchronous: one mini-batch, every action reads version 0,
// each rank ends with a STEP per stage. Stages form `dag` (a chain when empty). The
// result is lowered; run validate() on it. Errors name the row and column.
Program programFromCsv(const std::string& csv_text, const std::string& origin,
                       const StageDag& dag = {});

}  // namespace pipetrain::schedule
