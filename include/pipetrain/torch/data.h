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
  // The samples of each file of a sharded dataset, in file order (its indices run
  // through them in turn); empty for one file.
  virtual std::vector<int64_t> shardSizes() const { return {}; }
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
  // Token streams (isTokenStream): the width of a token, and the window a sample takes
  // where the model does not say (a model from a file; the zoo's gpt has its context).
  std::string token_dtype = "uint16";  // uint16 | uint32
  int64_t context = 0;
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
//   kShuffled  Fisher-Yates over a table of the indices (8 bytes a sample);
//   kKeyed     a keyed bijection computed per position (keyedPosition), nothing held:
//              for token streams, whose windows may number billions.
//   kShardwise for sharded files (Dataset::shardSizes): the shards in a keyed order, one
//              after the other, each shard's samples in a keyed order of their own, so
//              that a rank reads one shard at a time.
class SampleOrder {
 public:
  enum class Kind { kShuffled, kKeyed, kShardwise };
  SampleOrder(int64_t dataset_size, uint64_t seed, int64_t epoch, Kind kind = Kind::kShuffled,
              std::vector<int64_t> shard_sizes = {});
  int64_t minibatchesPerEpoch(int64_t microbatch_size, int microbatches) const;
  std::vector<int64_t> microbatch(int64_t minibatch, int microbatch, int64_t microbatch_size,
                                  int microbatches) const;

 private:
  int64_t shardwise(int64_t position) const;

  Kind kind_;
  int64_t size_ = 0;
  uint64_t key_ = 0;                   // kKeyed, kShardwise
  std::vector<int64_t> permutation_;   // kShuffled
  // kShardwise: the shards in the order read, where each starts in that order, and where
  // each starts among the dataset's indices.
  std::vector<int64_t> shard_order_, order_starts_, index_starts_, shard_sizes_;
};

// Epoch `epoch`'s order of `size` samples of `options`' data, as every rank takes it:
// keyed for a token stream, shard by shard for sharded files (Dataset::shardSizes),
// shuffled otherwise. `dataset` is null on a rank that reads no data, which only counts
// the mini-batches (minibatchesPerEpoch): it gets a keyed order, which holds nothing.
SampleOrder sampleOrder(const DataOptions& options, const Dataset* dataset, int64_t size, uint64_t seed,
                        int64_t epoch);

// Sharded tensor files: `--data-file DIR/NAME-00000.pt` where NAME-00001.pt is beside it
// opens every NAME-NNNNN.pt in turn from 00000 while they exist, each a torch.save file
// of the kind inputSpecOfFile reads (each holding out its own test split). One shard is
// read at a time: the sample order takes the shards one after the other
// (SampleOrder::Kind::kShardwise). The files, in order; empty where `path` is no such
// first shard.
std::vector<std::string> shardsOf(const std::string& path);

// kKeyed's bijection on [0, size): a 4-round Feistel network over the smallest even
// number of bits that holds size - 1, its round function SplitMix64's finaliser of
// (key, round, half), walked until it lands inside [0, size) (fewer than 4 steps on
// average). Written out so that a user's script can draw the same windows
// (bench/recipe/gpt2_recipe.py does, in Python).
int64_t keyedPosition(int64_t position, int64_t size, uint64_t key);

// Token streams as nanoGPT and Megatron-LM keep them: a flat file of uint16 (or uint32,
// DataOptions::token_dtype) tokens, mapped, never read whole. Sample i is the window of
// `context` tokens from i x context, its labels the next token of each. The test split is
// val.bin beside a file named train.bin, else the stream's last tenth. Named by the
// ".bin" extension.
bool isTokenStream(const std::string& path);

// What `options`' data serves a model loaded from a file: inputSpecOfFile's, or for a
// token stream, windows of DataOptions::context tokens over a vocabulary of its largest
// token + 1 (found by reading the stream once).
models::InputSpec inputSpecOf(const DataOptions& options);

}  // namespace pipetrain::data
