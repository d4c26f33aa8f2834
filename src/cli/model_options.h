// The options that name a zoo model and how its data is read, for the commands that
// train and profile (these need LibTorch; options.h has the rest).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "pipetrain/torch/data.h"
#include "pipetrain/torch/models.h"

namespace pipetrain::cli {

// --model-option values, KEY=INTEGER each ("layers=8"); Error on anything else.
models::ModelConfig parseModelOptions(const std::vector<std::string>& options);

// --context and --token-dtype: how a token stream's file (data.h, isTokenStream) is read.
void addTokenStreamOptions(CLI::App* cmd, data::DataOptions& data);

// The zoo's model names for help texts ("fmnist-cnn, mlp, ..."), from models::modelNames().
std::string modelNameList();

}  // namespace pipetrain::cli
