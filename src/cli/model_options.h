// The options that name a zoo model, for the commands that train and profile (these
// need LibTorch; options.h has the rest).
#pragma once

#include <string>
#include <vector>

#include "pipetrain/torch/models.h"

namespace pipetrain::cli {

// --model-option values, KEY=INTEGER each ("layers=8"); Error on anything else.
models::ModelConfig parseModelOptions(const std::vector<std::string>& options);

// The zoo's model names for help texts ("fmnist-cnn, mlp, ..."), from models::modelNames().
std::string modelNameList();

}  // namespace pipetrain::cli
