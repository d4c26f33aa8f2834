#include "pipetrain/util/option_table.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <type_traits>

#include "pipetrain/util/error.h"
#include "pipetrain/util/text.h"

namespace pipetrain::options {
namespace {

// A value parsed as the target's type: the whole text, in range.
template <typename T>
T parsed(const Option& o, const std::string& text) {
  const std::string where = "--" + o.name + " '" + text + "'";
  char* end = nullptr;
  errno = 0;
  if constexpr (std::is_same_v<T, double>) {
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || errno != 0 || !std::isfinite(v)) throw Error(where + ": expected a number");
    return v;
  } else {
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno != 0) throw Error(where + ": expected a whole number");
    if (std::is_unsigned_v<T> && v < 0) throw Error(where + ": expected a number of 0 or more");
    if (v < static_cast<long long>(std::numeric_limits<T>::min()) ||
        (v > 0 && static_cast<unsigned long long>(v) > static_cast<unsigned long long>(std::numeric_limits<T>::max())))
      throw Error(where + ": out of range");
    return static_cast<T>(v);
  }
}

void checkValue(const Option& o, const std::string& text) {
  if (!o.choices.empty() && std::find(o.choices.begin(), o.choices.end(), text) == o.choices.end())
    throw Error("--" + o.name + " '" + text + "': expected one of " + text::joined(o.choices));
  if (o.check == Check::kNone) return;
  const double v = parsed<double>(o, text);
  if (o.check == Check::kPositive && !(v > 0)) throw Error("--" + o.name + ": must be a positive number, found " + text);
  if (o.check == Check::kNonNegative && !(v >= 0)) throw Error("--" + o.name + ": must be 0 or more, found " + text);
}

// The values one by one, commas splitting them where the option takes a list.
std::vector<std::string> split(const Option& o, const std::vector<std::string>& values) {
  if (!o.list && o.values == 0) return values;
  std::vector<std::string> out;
  for (const std::string& v : values) {
    std::size_t start = 0;
    for (std::size_t comma; (comma = v.find(',', start)) != std::string::npos; start = comma + 1)
      out.push_back(v.substr(start, comma - start));
    out.push_back(v.substr(start));
  }
  return out;
}

}  // namespace

void apply(const Option& o, const std::vector<std::string>& given) {
  const std::vector<std::string> values = split(o, given);
  if (isFlag(o)) {
    if (values.size() != 1 || (values[0] != "true" && values[0] != "false"))
      throw Error("--" + o.name + " is a flag: true or false");
    if (values[0] == "false") return;
  } else if (values.empty() || (!o.list && o.values == 0 && values.size() > 1)) {
    throw Error("--" + o.name + " takes " + (o.list ? "one or more values" : "one value"));
  } else if (o.values > 0 && static_cast<int>(values.size()) != o.values) {
    throw Error("--" + o.name + " takes " + std::to_string(o.values) + " values");
  }
  if (!isFlag(o))
    for (const std::string& v : values) checkValue(o, v);
  std::visit(
      [&](const auto& target) {
        using T = std::decay_t<decltype(target)>;
        if constexpr (std::is_same_v<T, bool*>) *target = true;
        else if constexpr (std::is_same_v<T, std::function<void()>>) target();
        else if constexpr (std::is_same_v<T, std::string*>) *target = values[0];
        else if constexpr (std::is_same_v<T, std::function<void(const std::string&)>>) target(values[0]);
        else if constexpr (std::is_same_v<T, std::vector<std::string>*>) *target = values;
        else if constexpr (std::is_same_v<T, std::function<void(const std::vector<double>&)>>) {
          std::vector<double> numbers;
          for (const std::string& v : values) numbers.push_back(parsed<double>(o, v));
          target(numbers);
        } else if constexpr (std::is_same_v<T, std::vector<int>*> || std::is_same_v<T, std::vector<int64_t>*> ||
                             std::is_same_v<T, std::vector<double>*>) {
          target->clear();
          for (const std::string& v : values) target->push_back(parsed<typename std::decay_t<decltype(*target)>::value_type>(o, v));
        } else {
          *target = parsed<std::decay_t<decltype(*target)>>(o, values[0]);
        }
      },
      o.target);
}

void apply(const std::vector<Option>& table, const std::string& name, const std::vector<std::string>& values,
           const std::string& command) {
  for (const Option& o : table)
    if (o.name == name) return apply(o, values);
  std::vector<std::string> flags;
  for (const Option& o : table) flags.push_back("--" + o.name);
  throw Error("unknown option --" + name + " for `pipetrain " + command + "`" + text::didYouMean("--" + name, flags));
}

bool isFlag(const Option& option) {
  return std::holds_alternative<bool*>(option.target) || std::holds_alternative<std::function<void()>>(option.target);
}

json_io::Json optionsToJson(const std::vector<Option>& options) {
  json_io::Json out = json_io::Json::array();
  for (const Option& o : options) {
    std::string keyword = o.name;
    std::replace(keyword.begin(), keyword.end(), '-', '_');
    out.push_back({{"name", o.name},
                   {"keyword", keyword},
                   {"group", o.group},
                   {"help", o.help},
                   {"flag", isFlag(o)},
                   {"list", o.list || o.values > 1},
                   {"choices", o.choices}});
  }
  return out;
}

}  // namespace pipetrain::options
