#include "options.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

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

void addObjectiveOption(CLI::App* cmd, const planner::PlanObjective*& objective, const std::string& context) {
  std::string help = context + "what the planner ranks by:";
  for (const planner::PlanObjective* o : planner::objectives())
    help += std::string(o == planner::objectives().front() ? " " : "; ") + o->name() + " (" + o->help() + ")";
  cmd->add_option_function<std::string>(
         "--objective", [&objective](const std::string& name) { objective = &planner::objectiveNamed(name); },
         help + " [" + planner::objectives().front()->name() + "]")
      ->check(CLI::IsMember(planner::objectiveNames()));
}

namespace {

std::size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// "; did you mean 'train'?" for the nearest of `known` within a third of the name's
// length (at least 2 edits), else "".
std::string didYouMean(const std::string& name, const std::vector<std::string>& known) {
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, name.size() / 3) + 1;
  for (const std::string& k : known)
    if (const std::size_t d = editDistance(name, k); d < best_distance) best = k, best_distance = d;
  return best.empty() ? "" : "; did you mean " + best + "?";
}

}  // namespace

std::string unknownNameIn(const CLI::App& app, const std::vector<std::string>& args) {
  if (args.empty() || args[0].rfind("-", 0) == 0) return "";
  std::vector<std::string> commands;
  const CLI::App* chosen = nullptr;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    commands.push_back(sub->get_name());
    if (sub->get_name() == args[0]) chosen = sub;
  }
  if (!chosen) return "unknown command '" + args[0] + "'" + didYouMean(args[0], commands);
  if (chosen->get_allow_extras()) return "";  // pipetrain's forwarders: pipetrain-torch checks them
  std::vector<std::string> options;
  for (const CLI::Option* o : chosen->get_options())
    for (const std::string& name : o->get_lnames()) options.push_back("--" + name);
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--") break;
    if (args[i].rfind("--", 0) != 0) continue;
    const std::string name = args[i].substr(0, args[i].find('='));
    if (std::find(options.begin(), options.end(), name) == options.end())
      return "unknown option " + name + " for `pipetrain " + args[0] + "`" + didYouMean(name, options);
  }
  return "";
}

}  // namespace pipetrain::cli
