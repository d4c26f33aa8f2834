#include "pipetrain/util/option_table.h"

#include <algorithm>

namespace pipetrain::options {

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
