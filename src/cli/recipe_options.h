// The recipe's options for `train` (recipe/recipe.h): optimizer, learning-rate schedule,
// clipping. Parsed here; checked by recipe::check* (runtime::checkRecipe) before any
// profiling, so that each refusal names its option.
#pragma once

#include <CLI/CLI.hpp>

#include "pipetrain/torch/trainer.h"

namespace pipetrain::cli {

void addRecipeOptions(CLI::App* cmd, runtime::TrainConfig& config);

}  // namespace pipetrain::cli
