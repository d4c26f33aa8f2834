// Fashion-MNIST (Xiao et al. 2017) from the Debian package dataset-fashion-mnist:
// 28x28 grey images of clothes in 10 classes, 60000 for training and 10000 for test.
// Both IDX files of a split are read once into memory as uint8 (47 MB for train); a
// batch is converted to normalised float only when asked for.
#include <filesystem>

#include "pipetrain/util/error.h"
#include "readers.h"

namespace pipetrain::data {
namespace {

namespace fs = std::filesystem;
using models::InputKind;
using models::InputSpec;

// The training set's pixel mean and standard deviation (on the 0..1 scale), the values
// the Fashion-MNIST community normalises with.
constexpr double kMean = 0.2860;
constexpr double kStd = 0.3530;
constexpr int64_t kSide = 28;
constexpr int64_t kClasses = 10;
constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;
const char* const kFashionMnistInstallHint =
    "install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist)";

bool fits(const InputSpec& input) {
  if (input.kind == InputKind::kImage) return input.sample_shape == std::vector<int64_t>{1, kSide, kSide};
  if (input.kind == InputKind::kFeatures) return input.sample_shape == std::vector<int64_t>{kSide * kSide};
  return false;
}

void requireFile(const std::string& path) {
  if (!fs::is_regular_file(path)) throw Error(path + ": not found; " + kFashionMnistInstallHint);
}

class FashionMnist : public Dataset {
 public:
  // images: (N, 784) uint8; labels: (N) uint8 in [0, 10).
  FashionMnist(torch::Tensor images, torch::Tensor labels, bool features)
      : images_(std::move(images)), labels_(std::move(labels)), features_(features) {}

  int64_t size() const override { return labels_.size(0); }

  Batch get(const std::vector<int64_t>& indices) const override {
    checkIndices(indices, size(), "fashion-mnist");
    const torch::Tensor idx = torch::tensor(indices, torch::kLong);
    const int64_t n = idx.size(0);
    torch::Tensor x = images_.index_select(0, idx).to(torch::kFloat).div_(255.0).sub_(kMean).div_(kStd);
    x = features_ ? x.view({n, kSide * kSide}) : x.view({n, 1, kSide, kSide});  // (N, 784) | (N, 1, 28, 28)
    return {x, labels_.index_select(0, idx).to(torch::kLong)};
  }

  // The last stage calls this every micro-batch: it touches no pixels.
  torch::Tensor labels(const std::vector<int64_t>& indices) const override {
    checkIndices(indices, size(), "fashion-mnist");
    return labels_.index_select(0, torch::tensor(indices, torch::kLong)).to(torch::kLong);  // (N)
  }

 private:
  torch::Tensor images_;
  torch::Tensor labels_;
  bool features_;
};

}  // namespace

std::unique_ptr<Dataset> openFashionMnist(const DataOptions& options, const InputSpec& input) {
  // Check the model before reading 30 MB of gzip it could not use.
  if (!fits(input) || input.num_classes != kClasses) {
    throw Error("fashion-mnist serves 28x28 grey images in 10 classes, as image input (1, 28, 28) or "
                "feature input (784) with 10 classes, but the model takes " + describeInput(input) +
                ". Models that fit: fmnist-cnn and mlp as built, resnet50 with channels=1 and "
                "image_size=28 (vgg16 needs an image size that is a multiple of 32, so it cannot); "
                "any of them needs classes=10. Or use the synthetic dataset, which serves any shape.");
  }
  const std::string& dir = options.fashion_mnist_dir;
  if (!fs::is_directory(dir)) throw Error(dir + ": no such directory; " + kFashionMnistInstallHint);

  const std::string prefix = dir + "/" + (options.split == "train" ? "train" : "t10k");
  const std::string images_path = prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = prefix + "-labels-idx1-ubyte.gz";
  requireFile(images_path);
  requireFile(labels_path);

  IdxArray images = readIdxGz(images_path, kImagesMagic);  // (N, 28, 28)
  if (images.dims[1] != kSide || images.dims[2] != kSide) {
    throw Error(images_path + ": images are " + std::to_string(images.dims[1]) + "x" +
                std::to_string(images.dims[2]) + ", expected 28x28");
  }
  IdxArray labels = readIdxGz(labels_path, kLabelsMagic);  // (N)
  if (labels.dims[0] != images.dims[0]) {
    throw Error(labels_path + ": " + std::to_string(labels.dims[0]) + " labels but " + images_path + " has " +
                std::to_string(images.dims[0]) + " images");
  }
  if (labels.dims[0] > 0) {
    const int64_t top = labels.data.max().item<int64_t>();
    if (top >= kClasses) throw Error(labels_path + ": label " + std::to_string(top) + " is not a class 0..9");
  }
  const int64_t n = images.dims[0];
  return std::make_unique<FashionMnist>(images.data.view({n, kSide * kSide}), labels.data,
                                        input.kind == InputKind::kFeatures);
}

}  // namespace pipetrain::data
