// pipetrain: pipeline-parallel training. See README.md for the commands. The same main
// makes `pipetrain` (no LibTorch; hands the torch commands to pipetrain-torch) and
// `pipetrain-torch` (everything): commands.h.
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "options.h"
#include "pipetrain/graph/profile_cache.h"
#include "pipetrain/util/allocator.h"
#include "pipetrain/util/error.h"

namespace {

// A command line pipetrain cannot run: said in one line, exit 2, as usage errors are by
// convention.
int usageError(const std::string& message) {
  std::cerr << "pipetrain: error: " << message << "\nRun with --help for more information.\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // Before LibTorch allocates anything: freed tensors stay with the process, unless
  // PIPETRAIN_MALLOC=glibc; `pipetrain` preloads tcmalloc for pipetrain-torch where the
  // machine has it (allocator.h).
  pipetrain::util::applyHeapPolicyOfEnvironment();
  CLI::App app{"pipetrain: plan, simulate and run pipeline-parallel training"};
  app.require_subcommand(1);
  std::vector<pipetrain::cli::Command> commands = {
      pipetrain::cli::addScheduleCommand(app),
      pipetrain::cli::addSimulateCommand(app),
      pipetrain::cli::addPlanCommand(app),
      pipetrain::cli::addReportCommand(app),
  };
  for (auto& command : pipetrain::cli::addTorchCommands(app, std::vector<std::string>(argv, argv + argc)))
    commands.push_back(std::move(command));

  app.set_version_flag("--version", "pipetrain " PIPETRAIN_VERSION);
  // Where the Python API caches its data and captures, when it runs without
  // pipetrain_native (python/pipetrain/_binary.py).
  app.add_flag_callback(
         "--cache-dir",
         [] {
           std::cout << pipetrain::graph::ProfileCache::defaultDir() << "\n";
           throw CLI::Success();
         },
         "print where profiles and captures are cached, and exit")
      ->trigger_on_parse();
  if (const std::string mistake = pipetrain::cli::unknownNameIn(app, std::vector<std::string>(argv + 1, argv + argc));
      !mistake.empty())
    return usageError(mistake);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; a command line that does not parse exits 2, as
    // usage errors do by convention.
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const pipetrain::Error& e) {
    // An option's own reader refused its value while parsing (a size in an unknown unit,
    // --betas with one number): a usage error too.
    return usageError(e.what());
  }
  try {
    for (const auto& command : commands)
      if (command.app->parsed()) return command.run();
  } catch (const pipetrain::Error& e) {
    std::cerr << "pipetrain: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    // A peer that died mid-operation surfaces from Gloo's threads as a library error,
    // not pipetrain's: said as what it is, without LibTorch's stack frames.
    const std::string what = e.what();
    const std::string first_line = what.substr(0, what.find('\n'));
    if (what.find("Connection reset by peer") != std::string::npos ||
        what.find("Connection closed by peer") != std::string::npos) {
      std::cerr << "pipetrain: error: a peer rank closed its connection (it failed or was stopped): " << first_line
                << "\n";
      return 1;
    }
    std::cerr << "pipetrain: internal error: " << what << "\n";
    return 3;
  }
  return 1;
}
