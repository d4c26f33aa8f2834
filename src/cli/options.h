// Option parsing shared by the commands (none needs LibTorch: the commands that plan
// and simulate are built without it; model_options.h has the models' options).
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

// A byte count: "1048576", "64K", "16M", "1G" or with "iB" ("16MiB"); the suffixes are
// binary (K = 1024). Error naming `option` on anything else or on a size < 1.
int64_t parseByteSize(const std::string& text, const std::string& option);

// `--partitioner chain|graph|auto`, for plan and train alike.
void addPartitionerOption(CLI::App* cmd, planner::Partitioner& partitioner);
// `--recompute auto|none|full`, for plan and train alike.
void addRecomputeOption(CLI::App* cmd, planner::Recompute& recompute);
// --objective: one of planner::objectives(), each named with what it ranks by; `context`
// opens the help ("without --plan: ").
void addObjectiveOption(CLI::App* cmd, const planner::PlanObjective*& objective, const std::string& context);

// A command line's first mistake that CLI11 would name poorly, or "": an unknown
// command ("A subcommand is required") or an unknown --option of a known command (CLI11
// names a missing required option first), each with the nearest known name.
std::string unknownNameIn(const CLI::App& app, const std::vector<std::string>& args);

}  // namespace pipetrain::cli
