#include "options.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "pipetrain/util/error.h"

namespace pipetrain::cli {

int64_t parseByteSize(const std::string& text, const std::string& option) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  std::string suffix = end ? end : "";
  int shift = 0;
  if (!suffix.empty()) {
    const char unit = static_cast<char>(std::toupper(static_cast<unsigned char>(suffix[0])));
    shift = unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : -1;
    if (suffix.size() > 1 && suffix.substr(1) != "iB" && suffix.substr(1) != "B") shift = -1;
  }
  if (end == text.c_str() || shift < 0 || v < 1 || v > (int64_t{1} << (40 - shift)))
    throw Error(option + " \"" + text + "\": expected a positive size in bytes such as 65536, 64K, 16M or 1G");
  return static_cast<int64_t>(v) << shift;
}

void checkWritable(const std::string& path, const std::string& option) {
  const std::string probe = path + ".tmp";  // json_io::writeFile writes there first
  const bool ok = static_cast<bool>(std::ofstream(probe));
  std::remove(probe.c_str());
  if (!ok) throw Error(option + " " + path + ": cannot write there (does the folder exist?)");
}

CLI::Validator positive() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value) || !(value > 0)) return "must be a positive number, found " + text;
        return "";
      },
      "POSITIVE");
}

void addPartitionerOption(CLI::App* cmd, planner::Partitioner& partitioner) {
  cmd->add_option_function<std::string>(
         "--partitioner", [&partitioner](const std::string& name) { partitioner = planner::partitionerFromName(name); },
         "chain (PipeDream's DP over the layers in order), graph (GraphPipe's: independent branches become parallel "
         "stages) or auto (both on a multi-branch model; the simulator chooses) [auto]")
      ->check(CLI::IsMember({"auto", "chain", "graph"}));
}

void addRecomputeOption(CLI::App* cmd, planner::Recompute& recompute) {
  cmd->add_option_function<std::string>(
         "--recompute", [&recompute](const std::string& name) { recompute = planner::recomputeFromName(name); },
         "activation recomputation: auto (the planner makes the stages that would not fit their memory recompute "
         "their forward pass before the backward pass, and prices it), none, or full (every stage) [auto]")
      ->check(CLI::IsMember({"auto", "none", "full"}));
}

}  // namespace pipetrain::cli
