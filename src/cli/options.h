// Option parsing shared by the commands (none needs LibTorch: the commands that plan
// and simulate are built without it; the tables of options are the libraries',
// util/option_table.h).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "pipetrain/util/option_table.h"

namespace pipetrain::cli {

// A number above zero, said briefly when it is not ("must be a positive number, found
// -3"; CLI11's own check prints its range bound, DBL_MAX, in 300 digits).
CLI::Validator positive();

// A byte count: "1048576", "64K", "16M", "1G" or with "iB" ("16MiB"); the suffixes are
// binary (K = 1024). Error naming `option` on anything else or on a size < 1.
int64_t parseByteSize(const std::string& text, const std::string& option);

// Each option of `table` as the flag --NAME, listed under its group in help.
void addOptions(CLI::App* cmd, const std::vector<options::Option>& table);
// The names of the options of `table` that the command line gave.
std::set<std::string> givenOptions(const CLI::App& cmd, const std::vector<options::Option>& table);

// A command line's first mistake that CLI11 would name poorly, or "": an unknown
// command ("A subcommand is required") or an unknown --option of a known command (CLI11
// names a missing required option first), each with the nearest known name.
std::string unknownNameIn(const CLI::App& app, const std::vector<std::string>& args);

}  // namespace pipetrain::cli
