// The pipetrain subcommands. Each registers its options on the app and returns the
// function to run when it is chosen; main() only dispatches and prints errors.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace pipetrain::cli {

struct Command {
  CLI::App* app;            // the parsed subcommand
  std::function<int()> run;
};

Command addScheduleCommand(CLI::App& app);
Command addSimulateCommand(CLI::App& app);
Command addInfoCommand(CLI::App& app);
Command addPlanCommand(CLI::App& app);
// `argv` is this program's command line, which the launcher re-runs for each rank.
Command addTrainCommand(CLI::App& app, const std::vector<std::string>& argv);
Command addProfileCommand(CLI::App& app);
Command addReportCommand(CLI::App& app);
Command addExportCommand(CLI::App& app);
Command addProfileNetworkCommand(CLI::App& app, const std::vector<std::string>& argv);

}  // namespace pipetrain::cli
