// Internal to src/torch/data: the file readers, the per-dataset factories that
// openDataset() dispatches to, and the small deterministic helpers they share.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "pipetrain/torch/data.h"

namespace pipetrain::data {

// An IDX array (the MNIST file format, http://yann.lecun.com/exdb/mnist/): a big-endian
// magic 0x000008TT (TT = 0x08 for unsigned bytes, the only type we need) and DD dims,
// then the data row-major. `data` is a uint8 tensor already shaped by `dims`.
struct IdxArray {
  std::vector<int64_t> dims;
  torch::Tensor data;
};

// Reads a gzip-compressed IDX file. Throws Error naming `path` when the file cannot be
// opened, the gzip stream is corrupt or truncated, the magic is not `expected_magic`,
// or the data is shorter or longer than the dims say.
IdxArray readIdxGz(const std::string& path, uint32_t expected_magic);

// The dataset behind each name; `options.split` is already "train" or "test".
std::unique_ptr<Dataset> openFashionMnist(const DataOptions& options, const models::InputSpec& input);
std::unique_ptr<Dataset> openFortunes(const DataOptions& options, const models::InputSpec& input);
std::unique_ptr<Dataset> openSynthetic(const DataOptions& options, const models::InputSpec& input);
std::unique_ptr<Dataset> openTensorFile(const DataOptions& options, const models::InputSpec& input);
std::unique_ptr<Dataset> openTokenStream(const DataOptions& options, const models::InputSpec& input);
// The files shardsOf(options.file) names, one at a time.
std::unique_ptr<Dataset> openShards(const DataOptions& options, const models::InputSpec& input);
// The samples of `options.split` in the tensor file `options.file`, its tensors' pages unread.
int64_t tensorFileSamples(const DataOptions& options);

// "image (3, 32, 32), 10 classes": how a model's input reads in an error message.
std::string describeInput(const models::InputSpec& input);

// Throws Error if an index is outside [0, size): a bad index must fail loudly rather than
// read another sample (synthetic data would happily make one up).
void checkIndices(const std::vector<int64_t>& indices, int64_t size, const char* dataset);

// SplitMix64's finaliser (Steele et al. 2014): a bijection on 64 bits that spreads every
// input bit over the output. Written out so the data does not depend on the library.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace pipetrain::data
