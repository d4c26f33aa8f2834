// Sharded tensor files (data.h, shardsOf): NAME-00000.pt, NAME-00001.pt, ... read one at
// a time. Each shard is a tensor file as openTensorFile reads it; the dataset's indices
// run through the shards in file order, and the sample order (kShardwise) visits them
// one shard after the other, so that a rank holds the shard it reads and no other.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "pipetrain/util/error.h"
#include "readers.h"

namespace pipetrain::data {
namespace {

// "DIR/NAME-00003.pt" for shard 3 of the first shard's path, or "" where `first` does
// not end in "-00000.pt".
std::string shardPath(const std::string& first, int index) {
  const std::string suffix = "-00000.pt";
  if (first.size() <= suffix.size() || first.compare(first.size() - suffix.size(), suffix.size(), suffix) != 0)
    return "";
  char number[16];
  std::snprintf(number, sizeof number, "-%05d.pt", index);
  return first.substr(0, first.size() - suffix.size()) + number;
}

class ShardedFiles : public Dataset {
 public:
  ShardedFiles(DataOptions options, models::InputSpec input, std::vector<std::string> shards)
      : options_(std::move(options)), input_(std::move(input)), shards_(std::move(shards)) {
    int64_t start = 0;
    for (const std::string& path : shards_) {
      DataOptions one = options_;
      one.file = path;
      sizes_.push_back(tensorFileSamples(one));
      starts_.push_back(start);
      start += sizes_.back();
    }
    size_ = start;
  }

  int64_t size() const override { return size_; }
  std::vector<int64_t> shardSizes() const override { return sizes_; }

  Batch get(const std::vector<int64_t>& indices) const override {
    return gather(indices, [](const Dataset& d, const std::vector<int64_t>& i) { return d.get(i); });
  }
  torch::Tensor labels(const std::vector<int64_t>& indices) const override {
    return gather(indices, [](const Dataset& d, const std::vector<int64_t>& i) { return Batch{{}, d.labels(i)}; })
        .labels;
  }

 private:
  // The samples of `indices`, shard by shard (a micro-batch lies in one shard but where
  // the order crosses into the next), in the order asked.
  template <typename Read>
  Batch gather(const std::vector<int64_t>& indices, const Read& read) const {
    checkIndices(indices, size_, shards_.front().c_str());
    std::vector<Batch> parts;
    std::size_t i = 0;
    while (i < indices.size()) {
      const int shard = shardOf(indices[i]);
      std::vector<int64_t> local;
      for (; i < indices.size() && shardOf(indices[i]) == shard; ++i) local.push_back(indices[i] - starts_[shard]);
      parts.push_back(read(open(shard), local));
    }
    if (parts.size() == 1) return std::move(parts.front());
    Batch out;
    std::vector<torch::Tensor> inputs, labels;
    for (const Batch& b : parts) {
      if (b.inputs.defined()) inputs.push_back(b.inputs);
      labels.push_back(b.labels);
    }
    if (!inputs.empty()) out.inputs = torch::cat(inputs);
    out.labels = torch::cat(labels);
    return out;
  }

  int shardOf(int64_t index) const {
    return static_cast<int>(std::upper_bound(starts_.begin(), starts_.end(), index) - starts_.begin()) - 1;
  }

  // The shard, read; the one read before is let go. (A rank reads its data from one
  // thread.)
  const Dataset& open(int shard) const {
    if (shard != current_) {
      current_data_.reset();  // first: never two shards at once
      DataOptions one = options_;
      one.file = shards_[static_cast<std::size_t>(shard)];
      current_data_ = openTensorFile(one, input_);
      current_ = shard;
    }
    return *current_data_;
  }

  DataOptions options_;
  models::InputSpec input_;
  std::vector<std::string> shards_;
  std::vector<int64_t> sizes_, starts_;
  int64_t size_ = 0;
  mutable int current_ = -1;
  mutable std::unique_ptr<Dataset> current_data_;
};

}  // namespace

std::vector<std::string> shardsOf(const std::string& path) {
  if (shardPath(path, 1).empty() || !std::filesystem::exists(shardPath(path, 1))) return {};
  std::vector<std::string> shards;
  for (int i = 0; i < 100000 && std::filesystem::exists(shardPath(path, i)); ++i) shards.push_back(shardPath(path, i));
  return shards;
}

std::unique_ptr<Dataset> openShards(const DataOptions& options, const models::InputSpec& input) {
  return std::make_unique<ShardedFiles>(options, input, shardsOf(options.file));
}

}  // namespace pipetrain::data
