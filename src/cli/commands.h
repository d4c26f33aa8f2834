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

// The commands that run without LibTorch, in every pipetrain binary.
Command addScheduleCommand(CLI::App& app);
Command addSimulateCommand(CLI::App& app);
Command addPlanCommand(CLI::App& app);
Command addReportCommand(CLI::App& app);

// The commands that need LibTorch live in `pipetrain-torch`; `pipetrain`, built without
// LibTorch (whose libraries take 0.5 s to load: a third of planning PipeDream's models),
// hands them there. Registers them in the binary at hand: pipetrain-torch's real
// commands (torch_commands.cpp), or pipetrain's forwarders (torch_forwarding.cpp).
// `argv` is this program's command line.
std::vector<Command> addTorchCommands(CLI::App& app, const std::vector<std::string>& argv);

struct TorchCommand {
  const char* name;
  const char* description;
};
inline constexpr TorchCommand kTorchCommands[] = {
    {"train", "Train a model with pipeline parallelism on local or launched ranks"},
    {"profile", "Measure a model's per-layer times and memory; write a layer graph"},
    {"export", "Write a checkpoint's model as one file Python loads"},
    {"profile-network", "Measure latency and bandwidth between ranks over Gloo; write a cluster spec"},
    {"info", "Show the LibTorch build, threads, devices and matmul speed"},
};
// kTorchCommands' description of `name`.
const char* torchCommandDescription(const std::string& name);

// pipetrain-torch's commands (`argv`: this program's command line, which
// profile-network's launcher re-runs for each rank).
Command addTrainCommand(CLI::App& app);
Command addProfileCommand(CLI::App& app);
Command addExportCommand(CLI::App& app);
Command addInfoCommand(CLI::App& app);
Command addProfileNetworkCommand(CLI::App& app, const std::vector<std::string>& argv);

}  // namespace pipetrain::cli
