#include "model_options.h"

#include <cstdlib>

#include "pipetrain/util/error.h"

namespace pipetrain::cli {

models::ModelConfig parseModelOptions(const std::vector<std::string>& options) {
  models::ModelConfig out;
  for (const auto& o : options) {
    const auto eq = o.find('=');
    char* end = nullptr;
    const long long v = eq == std::string::npos ? 0 : std::strtoll(o.c_str() + eq + 1, &end, 10);
    if (eq == std::string::npos || !end || *end != '\0' || eq + 1 == o.size())
      throw Error("--model-option \"" + o + "\": expected KEY=INTEGER, e.g. layers=8");
    out[o.substr(0, eq)] = v;
  }
  return out;
}

std::string modelNameList() {
  std::string names;
  for (const std::string& name : models::modelNames()) names += (names.empty() ? "" : ", ") + name;
  return names;
}

}  // namespace pipetrain::cli
