// `pipetrain train --plan plan.json`: a plan file decides the stages, micro-batching and
// schedule of a training run instead of the command line's balanced split.
#pragma once

#include <string>

#include "pipetrain/torch/trainer.h"

namespace pipetrain::cli {

// Reads `path`, checks it against the model (every layer in exactly one stage, stages
// that are consecutive runs of the model's layers, a rank per replica or the interleaved
// layout, as many ranks as `world_size`) and writes the plan's choices into `config`.
// Throws Error naming the file and what does not match.
void applyPlan(const std::string& path, int world_size, runtime::TrainConfig& config);

}  // namespace pipetrain::cli
