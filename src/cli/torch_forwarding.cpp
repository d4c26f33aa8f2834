// pipetrain's forwarders of the commands that need LibTorch: each runs pipetrain-torch,
// from beside this binary, with the same command line (commands.h).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "commands.h"
#include "pipetrain/util/allocator.h"
#include "pipetrain/util/error.h"

namespace pipetrain::cli {
namespace {

[[noreturn]] void runInTorchBinary(const std::vector<std::string>& argv) {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  const std::string torch_binary = (self.parent_path() / "pipetrain-torch").string();
  if (error || access(torch_binary.c_str(), X_OK) != 0)
    throw Error("the commands that train and profile run in " + torch_binary +
                ", which is missing or not executable: build it beside pipetrain (`make`)");
  // argv[0] stays the user's, for help texts: the launcher re-runs /proc/self/exe.
  std::vector<std::string> args = argv;
  std::vector<char*> c_args;
  for (std::string& a : args) c_args.push_back(a.data());
  c_args.push_back(nullptr);
  // On tcmalloc where the machine has it, for pipetrain-torch and every process it starts
  // (util/allocator.h).
  util::preloadTcmallocForExec();
  execv(torch_binary.c_str(), c_args.data());
  throw Error("cannot run " + torch_binary + ": " + std::strerror(errno));
}

}  // namespace

std::vector<Command> addTorchCommands(CLI::App& app, const std::vector<std::string>& argv) {
  std::vector<Command> commands;
  for (const TorchCommand& c : kTorchCommands) {
    CLI::App* cmd = app.add_subcommand(c.name, c.description);
    // Every argument after the name, --help included, is pipetrain-torch's to parse.
    cmd->prefix_command();
    cmd->allow_extras();
    cmd->set_help_flag();
    commands.push_back({cmd, [argv]() -> int { runInTorchBinary(argv); }});
  }
  return commands;
}

}  // namespace pipetrain::cli
