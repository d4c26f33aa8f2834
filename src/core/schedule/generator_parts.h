// Generators that need more than one stage's view at a time, shared with generators.cpp.
#pragma once

#include <vector>

#include "pipetrain/schedule/program.h"

namespace pipetrain::schedule::detail {

// Zero-bubble list scheduling, the ZB paper's automatic-schedule heuristic: `layout` has
// its stage DAG, stage_ranks, micro-batches and mini-batches set; every rank is played
// forward in unit time slots (F, I and W equally long, transfers free), and in each slot
// takes, in this order: the next input-gradient pass (I) whose gradient is here; the
// next forward pass whose input is here, unless the rank already holds
// `activation_limit` stages' activations; the oldest deferred weight pass (W). So W
// passes fill what would be bubbles, and the limit sets the activation memory. A stage
// steps (after an ALLREDUCE when replicated) right after its last W of a mini-batch and
// runs no forward pass of the next mini-batch before. Returns each rank's compute list.
// Throws Error if no rank can move (a limit too small for the layout).
std::vector<std::vector<Action>> zeroBubbleListSchedule(const Program& layout, int activation_limit);

// DeepSeek's DualPipeV for rank `rank` of `ranks` (stages rank and 2*ranks-1-rank), over
// `minibatches` mini-batches of `microbatches`. REQUIRES: microbatches >= 2 * ranks.
std::vector<Action> dualPipeVRank(int rank, int ranks, int microbatches, int minibatches);

}  // namespace pipetrain::schedule::detail
