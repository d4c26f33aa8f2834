// Token streams (data.h, isTokenStream): a flat file of tokens, mapped read-only and
// read a window at a time, so that a run's resident memory does not grow with the file
// (the pages it read are the page cache's, which the kernel takes back when it needs
// them). The order of its windows is SampleOrder's keyed one: nothing per window is held.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "pipetrain/util/error.h"
#include "readers.h"

namespace pipetrain::data {
namespace {

using models::InputKind;
using models::InputSpec;

int tokenWidth(const std::string& dtype) {
  if (dtype == "uint16") return 2;
  if (dtype == "uint32") return 4;
  throw Error("--token-dtype must be uint16 or uint32, not '" + dtype + "'");
}

// The whole file, mapped read-only; unmapped with the last dataset reading it.
class MappedTokens {
 public:
  MappedTokens(const std::string& path, int width) : path_(path), width_(width) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(path + ": cannot open it: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
      ::close(fd);
      throw Error(path + ": an empty token stream");
    }
    bytes_ = static_cast<std::size_t>(st.st_size);
    if (bytes_ % static_cast<std::size_t>(width) != 0) {
      ::close(fd);
      throw Error(path + ": " + std::to_string(bytes_) + " bytes is not a whole number of " + std::to_string(width) +
                  "-byte tokens: is --token-dtype right?");
    }
    base_ = ::mmap(nullptr, bytes_, PROT_READ, MAP_SHARED, fd, 0);
    const int error = errno;
    ::close(fd);
    if (base_ == MAP_FAILED) throw Error(path + ": cannot map it: " + std::strerror(error));
    // Windows are drawn all over the file: read-ahead would fetch pages nobody reads.
    ::madvise(base_, bytes_, MADV_RANDOM);
  }
  ~MappedTokens() { ::munmap(base_, bytes_); }
  MappedTokens(const MappedTokens&) = delete;
  MappedTokens& operator=(const MappedTokens&) = delete;

  int64_t tokens() const { return static_cast<int64_t>(bytes_) / width_; }
  int64_t at(int64_t i) const {
    if (width_ == 2) return static_cast<const uint16_t*>(base_)[i];
    return static_cast<const uint32_t*>(base_)[i];
  }
  // The largest token + 1: one pass over the file.
  int64_t vocabulary() const {
    int64_t largest = 0;
    if (width_ == 2) {
      const auto* p = static_cast<const uint16_t*>(base_);
      largest = *std::max_element(p, p + tokens());
    } else {
      const auto* p = static_cast<const uint32_t*>(base_);
      largest = *std::max_element(p, p + tokens());
    }
    return largest + 1;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int width_;
  std::size_t bytes_ = 0;
  void* base_ = nullptr;
};

// Sample i: tokens [begin + i T, begin + i T + T) as inputs, each one's next as labels.
class TokenStream : public Dataset {
 public:
  TokenStream(std::shared_ptr<MappedTokens> file, int64_t begin, int64_t end, int64_t context, int64_t vocabulary)
      : file_(std::move(file)), begin_(begin), context_(context), vocabulary_(vocabulary),
        size_((end - begin - 1) / context) {}

  int64_t size() const override { return size_; }
  Batch get(const std::vector<int64_t>& indices) const override { return {windows(indices, 0), labels(indices)}; }
  torch::Tensor labels(const std::vector<int64_t>& indices) const override { return windows(indices, 1); }

 private:
  torch::Tensor windows(const std::vector<int64_t>& indices, int64_t shift) const {
    checkIndices(indices, size_, file_->path().c_str());
    const auto n = static_cast<int64_t>(indices.size());
    torch::Tensor out = torch::empty({n, context_}, torch::kLong);
    int64_t* dst = out.data_ptr<int64_t>();
    for (int64_t r = 0; r < n; ++r)
      for (int64_t t = 0; t < context_; ++t) {
        const int64_t token = file_->at(begin_ + indices[r] * context_ + t + shift);
        if (token >= vocabulary_)
          throw Error(file_->path() + ": token " + std::to_string(token) + " at " +
                      std::to_string(begin_ + indices[r] * context_ + t + shift) + " is outside the model's vocabulary of " +
                      std::to_string(vocabulary_));
        dst[r * context_ + t] = token;
      }
    return out;
  }

  std::shared_ptr<MappedTokens> file_;
  int64_t begin_, context_, vocabulary_, size_;
};

// The split's file and its region: val.bin beside train.bin, else the last tenth.
struct Region {
  std::shared_ptr<MappedTokens> file;
  int64_t begin = 0, end = 0;
};

Region regionOf(const DataOptions& options) {
  const int width = tokenWidth(options.token_dtype);
  const std::filesystem::path path(options.file);
  const std::filesystem::path val = path.parent_path() / "val.bin";
  if (path.filename() == "train.bin" && std::filesystem::exists(val)) {
    auto file = std::make_shared<MappedTokens>(options.split == "train" ? options.file : val.string(), width);
    return {file, 0, file->tokens()};
  }
  auto file = std::make_shared<MappedTokens>(options.file, width);
  const int64_t cut = file->tokens() * 9 / 10;
  return options.split == "train" ? Region{file, 0, cut} : Region{file, cut, file->tokens()};
}

}  // namespace

bool isTokenStream(const std::string& path) {
  return path.size() > 4 && path.compare(path.size() - 4, 4, ".bin") == 0;
}

InputSpec inputSpecOf(const DataOptions& options) {
  if (!isTokenStream(options.file)) return inputSpecOfFile(options.file);
  if (options.context < 1)
    throw Error(options.file + ": a token stream's samples are windows of --context tokens; give it (the model's "
                "context length)");
  InputSpec spec;
  spec.kind = InputKind::kTokens;
  spec.sample_shape = {options.context};
  spec.num_classes = MappedTokens(options.file, tokenWidth(options.token_dtype)).vocabulary();
  return spec;
}

std::unique_ptr<Dataset> openTokenStream(const DataOptions& options, const InputSpec& input) {
  if (input.kind != InputKind::kTokens || input.sample_shape.size() != 1 || input.sample_shape[0] < 1)
    throw Error(options.file + " is a token stream, but the model takes " + describeInput(input));
  const int64_t context = input.sample_shape[0];
  if (options.context > 0 && options.context != context)
    throw Error("--context " + std::to_string(options.context) + " differs from the model's context of " +
                std::to_string(context));
  const Region region = regionOf(options);
  if (region.end - region.begin < context + 1)
    throw Error(region.file->path() + ": the " + options.split + " split holds " +
                std::to_string(region.end - region.begin) + " tokens, too few for one window of " +
                std::to_string(context) + " + 1");
  return std::make_unique<TokenStream>(region.file, region.begin, region.end, context, input.num_classes);
}

}  // namespace pipetrain::data
