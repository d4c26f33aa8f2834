// pipetrain-torch's commands that need LibTorch (commands.h).
#include <stdexcept>

#include "commands.h"

namespace pipetrain::cli {

std::vector<Command> addTorchCommands(CLI::App& app, const std::vector<std::string>& argv) {
  return {addTrainCommand(app), addProfileCommand(app), addExportCommand(app),
          addProfileNetworkCommand(app, argv), addInfoCommand(app)};
}

const char* torchCommandDescription(const std::string& name) {
  for (const TorchCommand& c : kTorchCommands)
    if (name == c.name) return c.description;
  throw std::logic_error("no torch command '" + name + "' in kTorchCommands");
}

}  // namespace pipetrain::cli
