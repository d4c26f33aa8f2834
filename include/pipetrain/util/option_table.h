// A command's options declared once, as a table: the CLI makes each entry a flag
// (`--name`, src/cli/options.h's addOptions), and the Python API takes it as a keyword
// (`name` with '-' as '_', python/pipetrain/_binary.py), from the table's JSON.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "pipetrain/util/json_io.h"

namespace pipetrain::options {

// Where a given value goes: a field of the request, or a function that takes it (a
// name turned into an enum, two numbers into two fields). A bool* or a
// std::function<void()> is a flag, which takes no value.
using Target = std::variant<std::string*, int*, int64_t*, uint64_t*, double*, bool*, std::vector<std::string>*,
                            std::vector<int>*, std::vector<int64_t>*, std::vector<double>*,
                            std::function<void(const std::string&)>, std::function<void(const std::vector<double>&)>,
                            std::function<void()>>;

enum class Check { kNone, kPositive, kNonNegative };

struct Option {
  std::string name;   // "microbatch-size": the flag --microbatch-size, the keyword microbatch_size
  std::string group;  // the part of the job it belongs to, as help lists them ("the plan")
  std::string help;
  Target target;
  Check check = Check::kNone;
  std::vector<std::string> choices{};  // the values it takes, where they are few
  bool list = false;                 // comma-separated values, given once or repeated
  int values = 0;                    // a list of exactly this many values (0: any)
  bool show_default = false;         // help shows the target's value as its default
  bool required = false;

  // Chained after the four fields: Option{name, group, help, &field}.positive().shown().
  Option& positive() {
    check = Check::kPositive;
    return *this;
  }
  Option& nonNegative() {
    check = Check::kNonNegative;
    return *this;
  }
  Option& among(std::vector<std::string> values) {
    choices = std::move(values);
    return *this;
  }
  Option& repeated() {
    list = true;
    return *this;
  }
  Option& exactly(int count) {
    values = count;
    return *this;
  }
  Option& shown() {
    show_default = true;
    return *this;
  }
  Option& needed() {
    required = true;
    return *this;
  }
};

// Whether the option takes no value.
bool isFlag(const Option& option);

// Gives `option` the values a caller passed, as the command line would: one for a value,
// several for a list (each may hold commas), "true" or "false" for a flag. Error naming
// the option where a value does not parse or is refused by its check or choices.
void apply(const Option& option, const std::vector<std::string>& values);
// The same by name; where `table` holds no such option, the error the command line gives
// `pipetrain COMMAND`, with the nearest it holds.
void apply(const std::vector<Option>& table, const std::string& name, const std::vector<std::string>& values,
           const std::string& command);

// The table as the Python API reads it: [{"name", "keyword", "group", "help", "flag",
// "list", "choices"}, ...].
json_io::Json optionsToJson(const std::vector<Option>& options);

}  // namespace pipetrain::options
