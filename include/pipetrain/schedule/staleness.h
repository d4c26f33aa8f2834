// Staleness read off a Program, and the two PipeMare techniques that compensate for it
// (docs/async.md). Executors and the single-process reference both use these, so the
// delay a stage is corrected for is the one its Program really has.
#pragma once

#include <cstdint>
#include <map>
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

// Which STEP applies each micro-batch's gradient, and the scale that makes every STEP
// apply the mean gradient of exactly the micro-batches it combines (a mini-batch, one
// micro-batch under PipeDream, one per replica when a stage is replicated). The last
// stage scales a micro-batch's loss by lossScale(j); a stage whose STEP combines a
// different number multiplies its gradients by gradientFactor(s, v) before stepping.
struct StepCombination {
  std::vector<std::vector<int>> step_of;     // [stage][micro-batch] -> version its STEP creates, -1 none
  std::vector<std::map<int, int>> combined;  // [stage][version] -> micro-batches (all replicas)
  std::vector<double> loss_scale;            // per micro-batch
  std::vector<std::map<int, double>> gradient_factor;  // [stage][version]
};
// Throws Error when one STEP combines micro-batches whose losses are scaled differently.
StepCombination stepCombination(const Program& program);

// T1, learning-rate rescheduling: the factor on the base rate at the stage's k-th step
// (k from 0): delay^-(1 - min(k / warmup_steps, 1)); 1/delay at first, 1 after warm-up.
double learningRateScale(int delay, int64_t step, int64_t warmup_steps);

// T2, discrepancy correction: the decay of the velocity's moving average, D^(1/delay).
double correctionDecay(double decay, int delay);

}  // namespace pipetrain::schedule
