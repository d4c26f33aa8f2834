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

void addTokenStreamOptions(CLI::App* cmd, data::DataOptions& data) {
  cmd->add_option("--context", data.context,
                  "a token stream (--data-file FILE.bin): tokens per sample, the model's context length (a --model-file "
                  "model's; the zoo's gpt has its own)");
  cmd->add_option("--token-dtype", data.token_dtype, "a token stream (--data-file FILE.bin): uint16 or uint32")
      ->capture_default_str();
}

}  // namespace pipetrain::cli
