#include "options.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <variant>

#include "pipetrain/util/error.h"
#include "pipetrain/util/text.h"

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

void addOptions(CLI::App* cmd, const std::vector<options::Option>& table) {
  for (const options::Option& o : table) {
    const std::string flag = "--" + o.name;
    using StringSetter = std::function<void(const std::string&)>;
    using NumbersSetter = std::function<void(const std::vector<double>&)>;
    CLI::Option* added = std::visit(
        [&](const auto& target) -> CLI::Option* {
          using T = std::decay_t<decltype(target)>;
          if constexpr (std::is_same_v<T, bool*>) return cmd->add_flag(flag, *target, o.help);
          else if constexpr (std::is_same_v<T, std::function<void()>>) return cmd->add_flag_callback(flag, target, o.help);
          else if constexpr (std::is_same_v<T, StringSetter>) return cmd->add_option_function<std::string>(flag, target, o.help);
          else if constexpr (std::is_same_v<T, NumbersSetter>)
            return cmd->add_option_function<std::vector<double>>(flag, target, o.help);
          else return cmd->add_option(flag, *target, o.help);
        },
        o.target);
    added->group(o.group);
    if (o.show_default) added->capture_default_str();
    if (o.required) added->required();
    if (o.check == options::Check::kPositive) added->check(positive());
    if (o.check == options::Check::kNonNegative) added->check(CLI::NonNegativeNumber);
    if (!o.choices.empty()) added->check(CLI::IsMember(o.choices));
    if (o.list) added->delimiter(',')->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    if (o.values > 0) added->delimiter(',')->expected(o.values);
  }
}

std::set<std::string> givenOptions(const CLI::App& cmd, const std::vector<options::Option>& table) {
  std::set<std::string> given;
  for (const options::Option& o : table)
    if (cmd.count("--" + o.name) > 0) given.insert(o.name);
  return given;
}

std::string unknownNameIn(const CLI::App& app, const std::vector<std::string>& args) {
  if (args.empty() || args[0].rfind("-", 0) == 0) return "";
  std::vector<std::string> commands;
  const CLI::App* chosen = nullptr;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    commands.push_back(sub->get_name());
    if (sub->get_name() == args[0]) chosen = sub;
  }
  if (!chosen) return "unknown command '" + args[0] + "'" + text::didYouMean(args[0], commands);
  if (chosen->get_allow_extras()) return "";  // pipetrain's forwarders: pipetrain-torch checks them
  std::vector<std::string> options;
  for (const CLI::Option* o : chosen->get_options())
    for (const std::string& name : o->get_lnames()) options.push_back("--" + name);
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--") break;
    if (args[i].rfind("--", 0) != 0) continue;
    const std::string name = args[i].substr(0, args[i].find('='));
    if (std::find(options.begin(), options.end(), name) == options.end())
      return "unknown option " + name + " for `pipetrain " + args[0] + "`" + text::didYouMean(name, options);
  }
  return "";
}

}  // namespace pipetrain::cli
