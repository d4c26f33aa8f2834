// Generators that need more than one stage's view at a time, shared with generators.cpp.
#pragma once

#include <vector>

#include "pipetrain/schedule/program.h"

namespace pipetrain::schedule::detail {

// Zero-bubble list scheduling (ZB-H2), the ZB paper's automatic-schedule heuristic:
// `layout` has its stage DAG, stage_ranks (one stage replica per rank), micro-batches
// and mini-batches set. Every rank is played forward in unit time slots (F, I and W
// equally long, transfers free) and in each slot takes, in this order: its next
// input-gradient pass (I) whose gradient is here; its next forward pass whose input is
// here, unless it already holds `activation_limit` micro-batches' activations; its
// oldest deferred weight pass (W). So W passes fill what would be bubbles and the limit
// sets the activation memory. A stage steps (after an ALLREDUCE when replicated) right
// after its last W of a mini-batch and runs no forward pass of the next one before.
// Returns each rank's compute list. Throws Error if no rank can move.
std::vector<std::vector<Action>> zeroBubbleListSchedule(const Program& layout, int activation_limit);

// ZB-V for rank `rank` of `ranks` (stages rank and 2*ranks-1-rank), over `minibatches`
// mini-batches of `microbatches`.
std::vector<Action> zeroBubbleVRank(int rank, int ranks, int microbatches, int minibatches);

// DeepSeek's DualPipeV for rank `rank` of `ranks` (stages rank and 2*ranks-1-rank), over
// `minibatches` mini-batches of `microbatches`. REQUIRES: microbatches >= 2 * ranks.
std::vector<Action> dualPipeVRank(int rank, int ranks, int microbatches, int minibatches);

}  // namespace pipetrain::schedule::detail
