// A byte-level language-modelling corpus from the Debian package fortunes: the text
// files under /usr/share/games/fortunes concatenated in name order. Bytes are tokens
// (vocabulary 256), so there is no tokenizer to build, ship or version.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "pipetrain/util/error.h"
#include "readers.h"

namespace pipetrain::data {
namespace {

namespace fs = std::filesystem;
using models::InputKind;
using models::InputSpec;

const char* const kFortunesInstallHint = "install the Debian package fortunes (apt-get install fortunes)";

// The *.dat files are strfile indexes, not text, and the *.u8 names are symlinks to the
// same files: skipping both keeps every fortune exactly once.
std::vector<uint8_t> readCorpus(const std::string& dir) {
  if (!fs::is_directory(dir)) throw Error(dir + ": no such directory; " + kFortunesInstallHint);
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_symlink() || !entry.is_regular_file() || entry.path().extension() == ".dat") continue;
    files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());  // directory order is arbitrary; every rank must agree
  std::vector<uint8_t> bytes;
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path.string() + ": cannot open");
    bytes.insert(bytes.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (in.bad()) throw Error(path.string() + ": read error");
  }
  if (bytes.empty()) throw Error(dir + ": no fortune text files; " + kFortunesInstallHint);
  return bytes;
}

// Sample i is bytes [i*T, i*T + T] of the split's region: non-overlapping windows of T
// inputs, each with its T next bytes as labels, never crossing into the other split.
class Fortunes : public Dataset {
 public:
  Fortunes(torch::Tensor region, int64_t context)
      : bytes_(std::move(region)), context_(context), size_((bytes_.size(0) - 1) / context) {}

  int64_t size() const override { return size_; }

  Batch get(const std::vector<int64_t>& indices) const override {
    return {windows(indices, 0), labels(indices)};
  }

  torch::Tensor labels(const std::vector<int64_t>& indices) const override { return windows(indices, 1); }

 private:
  // (N, T) int64: the window of each sample, starting `shift` bytes in.
  torch::Tensor windows(const std::vector<int64_t>& indices, int64_t shift) const {
    checkIndices(indices, size_, "fortunes");
    const auto n = static_cast<int64_t>(indices.size());
    torch::Tensor out = torch::empty({n, context_}, torch::kLong);
    const uint8_t* src = bytes_.data_ptr<uint8_t>();
    int64_t* dst = out.data_ptr<int64_t>();
    for (int64_t r = 0; r < n; ++r) {
      const uint8_t* from = src + indices[r] * context_ + shift;
      std::copy(from, from + context_, dst + r * context_);
    }
    return out;
  }

  torch::Tensor bytes_;  // (region bytes) uint8, this split only
  int64_t context_;
  int64_t size_;
};

}  // namespace

std::unique_ptr<Dataset> openFortunes(const DataOptions& options, const InputSpec& input) {
  if (input.kind != InputKind::kTokens || input.sample_shape.size() != 1 || input.sample_shape[0] < 1 ||
      input.num_classes != 256) {
    throw Error("fortunes serves byte tokens: the model must take token input (context) with a vocabulary "
                "of 256, but it takes " + describeInput(input) +
                ". Use gpt with vocab=256 (its default), or the synthetic dataset.");
  }
  const int64_t context = input.sample_shape[0];
  std::vector<uint8_t> corpus = readCorpus(options.fortunes_dir);
  const auto total = static_cast<int64_t>(corpus.size());
  const int64_t cut = total * 9 / 10;  // train: [0, cut), test: [cut, total)
  const int64_t begin = options.split == "train" ? 0 : cut;
  const int64_t end = options.split == "train" ? cut : total;
  if (end - begin < context + 1) {
    throw Error(options.fortunes_dir + ": the " + options.split + " split has " + std::to_string(end - begin) +
                " bytes, too few for one window of context " + std::to_string(context) + " + 1");
  }
  torch::Tensor bytes = torch::empty({end - begin}, torch::kUInt8);  // only this split's region
  std::copy(corpus.begin() + begin, corpus.begin() + end, bytes.data_ptr<uint8_t>());
  return std::make_unique<Fortunes>(std::move(bytes), context);
}

}  // namespace pipetrain::data
