// openDataset(): the one entry point, dispatching on the dataset's name, and the
// helpers every dataset shares.
#include <sstream>

#include "pipetrain/util/error.h"
#include "readers.h"

namespace pipetrain::data {

std::string describeInput(const models::InputSpec& input) {
  std::ostringstream s;
  if (!input.named.empty()) {
    s << "inputs ";
    for (std::size_t k = 0; k < input.named.size(); ++k) {
      const models::NamedInput& part = input.named[k];
      s << (k ? ", " : "") << part.name << " (";
      for (std::size_t i = 0; i < part.sample_shape.size(); ++i) s << (i ? ", " : "") << part.sample_shape[i];
      s << (part.integer ? ") int" : ") float");
    }
    s << "; " << input.num_classes;
    if (input.loss == models::LossKind::kMeanSquaredError) s << " float targets";
    else s << (input.kind == models::InputKind::kTokens ? " vocabulary" : " classes");
    return s.str();
  }
  switch (input.kind) {
    case models::InputKind::kImage: s << "image"; break;
    case models::InputKind::kFeatures: s << "features"; break;
    case models::InputKind::kTokens: s << "tokens"; break;
    case models::InputKind::kIndices: s << "indices"; break;
  }
  s << " (";
  for (size_t i = 0; i < input.sample_shape.size(); ++i) s << (i ? ", " : "") << input.sample_shape[i];
  s << "), " << input.num_classes;
  if (input.loss == models::LossKind::kMeanSquaredError) s << " float targets";
  else s << (input.kind == models::InputKind::kTokens ? " vocabulary" : " classes");
  return s.str();
}

void checkIndices(const std::vector<int64_t>& indices, int64_t size, const char* dataset) {
  for (int64_t i : indices) {
    if (i < 0 || i >= size) {
      throw Error(std::string(dataset) + ": sample index " + std::to_string(i) + " is outside [0, " +
                  std::to_string(size) + ")");
    }
  }
}

std::unique_ptr<Dataset> openDataset(const DataOptions& options, const models::InputSpec& input) {
  if (options.split != "train" && options.split != "test") {
    throw Error("data split '" + options.split + "': expected train or test");
  }
  if (isTokenStream(options.file)) return openTokenStream(options, input);
  if (!shardsOf(options.file).empty()) return openShards(options, input);
  if (!options.file.empty()) return openTensorFile(options, input);
  if (options.name == "fashion-mnist") return openFashionMnist(options, input);
  if (options.name == "fortunes") return openFortunes(options, input);
  if (options.name == "synthetic") return openSynthetic(options, input);
  throw Error("dataset '" + options.name + "': unknown; known datasets are fashion-mnist, fortunes, synthetic");
}

}  // namespace pipetrain::data
