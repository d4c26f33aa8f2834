// Datasets from Debian packages, read directly, plus synthetic data; and the
// deterministic order every rank derives from the same seed (the first stage reads the
// inputs, the last stage the labels, and they agree without talking).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "pipetrain/torch/models.h"

namespace pipetrain::data {

struct Batch {
  torch::Tensor inputs;  // (N, sample_shape...) float, or (N, T) int64 tokens
  torch::Tensor labels;  // (N) int64 classes, or (N, T) int64 next tokens
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // REQUIRES: every index < size().
  virtual Batch get(const std::vector<int64_t>& indices) const = 0;
  // Only the labels (the last stage needs no inputs).
  virtual torch::Tensor labels(const std::vector<int64_t>& indices) const { return get(indices).labels; }
};

struct DataOptions {
  std::string name = "synthetic";  // fashion-mnist | fortunes | synthetic
  // The user's tensors (a torch.save file, see inputSpecOfFile); when set, `name` is unused.
  std::string file;
  std::string split = "train";     // train | test
  // Where the Debian packages put the files; overridable for tests.
  std::string fashion_mnist_dir = "/usr/share/datasets/fashion-mnist";
  std::string fortunes_dir = "/usr/share/games/fortunes";
  int64_t synthetic_size = 4096;
  uint64_t seed = 0;
};

// Opens the dataset for `input` (the model's InputSpec): fashion-mnist serves
// (1, 28, 28) images or (784) features; fortunes serves (context) byte tokens with the
// next bytes as labels; synthetic serves any shape. A missing package, a corrupt file
// or a shape the dataset cannot serve is an Error saying which and how to fix it
// (e.g. "apt-get install dataset-fashion-mnist").
std::unique_ptr<Dataset> openDataset(const DataOptions& options, const models::InputSpec& input);

// The user's data: a file written by Python's torch.save holding a dict of tensors,
//   {"inputs": X, "labels": Y}                       (every tenth sample held out for tests)
//   {"inputs": X, "labels": Y, "test_inputs": Xt, "test_labels": Yt}
// X is (N, ...) float (float64 is read as float32) or integer (token or index inputs,
// read as int64); Y is (N) or (N, T) integer class labels (cross-entropy) or float targets
// (mean squared error). Returns the InputSpec the file serves: its sample shape, kind,
// loss and class count (the largest label + 1) or targets per sample. A file that is not
// such a dict, or whose tensors disagree, is an Error naming the file and the key.
models::InputSpec inputSpecOfFile(const std::string& path);

// Sample order for an epoch: a permutation of [0, size) from (seed, epoch), identical in
// every process. Mini-batch k, micro-batch j of size b covers positions
// (k*m + j)*b .. +b of the permutation; a final partial mini-batch is dropped.
class SampleOrder {
 public:
  SampleOrder(int64_t dataset_size, uint64_t seed, int64_t epoch);
  int64_t minibatchesPerEpoch(int64_t microbatch_size, int microbatches) const;
  std::vector<int64_t> microbatch(int64_t minibatch, int microbatch, int64_t microbatch_size,
                                  int microbatches) const;

 private:
  std::vector<int64_t> permutation_;
};

}  // namespace pipetrain::data
