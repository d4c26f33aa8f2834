// Staleness read off a Program, and the two PipeMare techniques that compensate for it
// (docs/async.md). Executors and the single-process reference both use these, so the
// delay a stage is corrected for is the one its Program really has.
#pragma once

#include <cstdint>
#include <vector>

#include "pipetrain/schedule/program.h"

namespace pipetrain::schedule {

// Optimizer steps of stage s taken between the forward and the backward pass of
// micro-batch j on its rank: delays[s][j] (0 under a flushing schedule; -1 where the
// stage does not run j's backward, e.g. a forward-only Program).
std::vector<std::vector<int>> forwardDelays(const Program& program);

// The delay each stage's learning rate and correction are tuned for: the largest delay
// of its micro-batches (the steady state's), at least 1.
std::vector<int> stageDelays(const Program& program);

// T1, learning-rate rescheduling: the factor on the base rate at the stage's k-th step
// (k from 0): delay^-(1 - min(k / warmup_steps, 1)); 1/delay at first, 1 after warm-up.
double learningRateScale(int delay, int64_t step, int64_t warmup_steps);

// T2, discrepancy correction: the decay of the velocity's moving average, D^(1/delay).
double correctionDecay(double decay, int delay);

}  // namespace pipetrain::schedule
