// What each schedule is, in one table: every property of a schedule that code outside
// the generators needs (asynchronous or not, chunks, split backward, which weights a
// backward pass reads, when STEP happens, whether stages may be replicated, and the
// bounds the planner's memory model uses) is read from here, never from a string
// comparison elsewhere. The exact footprint of a concrete Program is
// schedule/program_memory.h; the bounds below are what a planner may assume before a
// Program exists.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/schedule/program.h"

namespace pipetrain::schedule {

enum class ScheduleKind : uint8_t {
  kGpipe,
  k1F1B,
  kPipeDream,
  k2BW,
  kPipeMare,
  kInterleaved,
  kZbH1,
  kZbH2,
  kZbV,
  kDualPipeV,
  kCount
};
constexpr int kNumSchedules = static_cast<int>(ScheduleKind::kCount);

// When a stage steps its optimizer.
enum class StepRule : uint8_t {
  kPerMinibatch,   // after the gradients of a whole mini-batch (accumulated over m micro-batches)
  kPerMicrobatch,  // after every backward pass (PipeDream): a replicated stage steps after
                   // each round of one micro-batch per replica
};

// Which stages a rank runs.
enum class Placement : uint8_t {
  kOnePerRank,  // one stage (replica) per rank
  kLooped,      // rank r of p runs stages r, r+p, ..., `chunks` of them (Megatron's interleaved)
  kV,           // rank r of p runs stages r and 2p-1-r: the V of ZB-V and DualPipeV, so the
                // first and last stages share rank 0 and the turn (p-1 -> p) needs no transfer
};

struct ScheduleTraits {
  ScheduleKind kind;
  const char* name;
  const char* summary;           // one line for help texts and docs
  bool asynchronous;             // never flushes: training semantics differ from synchronous SGD
  Placement placement;
  bool split_backward;           // backward runs as I then W (zero bubble)
  BackwardWeights backward_weights;
  StepRule step_rule;
  bool replicable;               // stages may have data-parallel replicas
  bool all_forwards_first;       // GPipe: every micro-batch of a mini-batch is in flight at once
  bool doubled_warmup;           // ZB-H2: up to 2p-1 micro-batches in flight on a p-stage path
  int fixed_weight_versions;     // versions a stage holds when fixed (1, or 2 for 2BW); 0 = grows
                                 // with the micro-batches in flight (PipeDream's stash)
  int min_microbatches_per_rank;   // m >= this x pipeline ranks, or the schedule cannot be built
};

const ScheduleTraits& traits(ScheduleKind kind);
// Throws Error listing the known names.
const ScheduleTraits& traits(const std::string& name);
ScheduleKind scheduleKind(const std::string& name);
inline bool isAsynchronous(const std::string& name) { return traits(name).asynchronous; }
const std::vector<std::string>& scheduleNames();
// "gpipe, 1f1b, ..." for help texts.
std::string scheduleNameList();
void checkScheduleName(const std::string& name);

// Stages each rank runs: `chunks` (the user's choice) when looped, 2 in a V, else 1.
int stagesPerRank(const ScheduleTraits& t, int chunks);
inline bool multiStage(const ScheduleTraits& t) { return t.placement != Placement::kOnePerRank; }
// The rank of `stage` when `ranks` ranks share the stages under `placement`.
// REQUIRES: multiStage placement; 0 <= stage < ranks * stagesPerRank.
int placedRank(Placement placement, int stage, int ranks);

// Whether a stage of this schedule may run on `replicas` data-parallel replicas when a
// mini-batch has `microbatches` micro-batches. Replica k of r runs micro-batches k, k+r,
// k+2r, ... (counted over the whole run), so when m is no multiple of r the shares of a
// mini-batch differ by one. That is sound wherever every replica steps once per
// mini-batch, after the all-reduce: each STEP still applies the mean gradient of the m
// micro-batches (stepCombination). PipeDream's step after every round of one
// micro-batch per replica needs r to divide m. Every replica needs a micro-batch of its
// own in every mini-batch (r <= m).
bool replicasCanSplit(const ScheduleTraits& t, int microbatches, int replicas);
// Micro-batches of a mini-batch that the busiest of r replicas runs: ceil(m / r).
inline int busiestReplicaShare(int microbatches, int replicas) { return (microbatches + replicas - 1) / replicas; }

// Planner bounds, derived from the table (the Program's accounting is exact):
// micro-batches of activations the deepest stage of a `depth`-stage pipeline holds, and
// weight copies besides optimizer state (versions, one gradient buffer, plus
// `extra_weight_buffers`, e.g. PipeMare's velocity for discrepancy correction).
int inflightMicrobatchesBound(ScheduleKind kind, int depth, int microbatches);
double weightCopiesBound(ScheduleKind kind, int inflight, int extra_weight_buffers);

}  // namespace pipetrain::schedule
