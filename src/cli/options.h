// Option parsing shared by the commands.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "pipetrain/planner/explore.h"

namespace pipetrain::cli {

// A number above zero, said briefly when it is not ("must be a positive number, found
// -3"; CLI11's own check prints its range bound, DBL_MAX, in 300 digits).
CLI::Validator positive();

// --model-option values, KEY=INTEGER each ("layers=8"); Error on anything else. The
// result is a models::ModelConfig, spelt out so that this header (and the commands that
// plan and simulate without LibTorch) need no torch header.
std::map<std::string, int64_t> parseModelOptions(const std::vector<std::string>& options);

// A byte count: "1048576", "64K", "16M", "1G" or with "iB" ("16MiB"); the suffixes are
// binary (K = 1024). Error naming `option` on anything else or on a size < 1.
int64_t parseByteSize(const std::string& text, const std::string& option);

// Fails early, before any long measurement, when `path` cannot be written: an Error
// naming `option` and the path. Leaves no file behind.
void checkWritable(const std::string& path, const std::string& option);

// The zoo's model names for help texts ("fmnist-cnn, mlp, ..."), from models::modelNames().
std::string modelNameList();

// `--partitioner chain|graph|auto`, for plan and train alike.
void addPartitionerOption(CLI::App* cmd, planner::Partitioner& partitioner);

}  // namespace pipetrain::cli
