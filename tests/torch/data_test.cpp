// Datasets and sample order: the real Debian data sets load with their known sizes and
// values, bad files and shapes fail with a message naming the file and the fix, and
// every sample and every order is a pure function of its seed.
#include "pipetrain/torch/data.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <gtest/gtest.h>

#include "../core/expect_error.h"

namespace pipetrain::data {
namespace {

namespace fs = std::filesystem;
using models::InputKind;
using models::InputSpec;
using testing::expectError;

const InputSpec kImage{InputKind::kImage, {1, 28, 28}, 10};
const InputSpec kFeatures{InputKind::kFeatures, {784}, 10};

std::vector<int64_t> range(int64_t first, int64_t last) {
  std::vector<int64_t> v(static_cast<size_t>(last - first));
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::unique_ptr<Dataset> open(const std::string& name, const std::string& split, const InputSpec& input,
                              const std::string& dir = "") {
  DataOptions o;
  o.name = name;
  o.split = split;
  if (!dir.empty()) o.fashion_mnist_dir = o.fortunes_dir = dir;
  return openDataset(o, input);
}

// A fresh directory per test, removed afterwards.
class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("pipetrain_data_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// ---- Fashion-MNIST, real files -------------------------------------------------------

TEST(FashionMnist, TrainSplitIsTheKnown60000) {
  const auto data = open("fashion-mnist", "train", kImage);
  ASSERT_EQ(data->size(), 60000);
  const torch::Tensor labels = data->labels(range(0, 60000));
  EXPECT_TRUE(torch::equal(labels.slice(0, 0, 10), torch::tensor({9, 0, 0, 3, 0, 2, 7, 2, 5, 5}, torch::kLong)));
  EXPECT_TRUE(torch::equal(labels.bincount(), torch::full({10}, 6000, torch::kLong)));  // balanced classes
  // The normalisation constants are the training set's mean: the mean pixel, undone, is 72.94.
  double sum = 0;
  for (int64_t first = 0; first < 60000; first += 10000) {
    sum += data->get(range(first, first + 10000)).inputs.to(torch::kDouble).sum().item<double>();
  }
  const double mean_pixel = (sum / (60000.0 * 784) * 0.3530 + 0.2860) * 255;
  EXPECT_NEAR(mean_pixel, 0.2860 * 255, 1.0);
  const double first_image = ((data->get({0}).inputs.to(torch::kDouble) * 0.3530 + 0.2860) * 255).sum().item<double>();
  EXPECT_NEAR(first_image, 76247, 0.5);  // sum of image 0's bytes, computed with Python's gzip
}

TEST(FashionMnist, TestSplitServesImagesOrFeatures) {
  const auto images = open("fashion-mnist", "test", kImage);
  const auto features = open("fashion-mnist", "test", kFeatures);
  ASSERT_EQ(images->size(), 10000);
  const Batch a = images->get({0, 1, 9999});
  const Batch b = features->get({0, 1, 9999});
  EXPECT_EQ(a.inputs.sizes(), (std::vector<int64_t>{3, 1, 28, 28}));
  EXPECT_EQ(b.inputs.sizes(), (std::vector<int64_t>{3, 784}));
  EXPECT_EQ(a.inputs.scalar_type(), torch::kFloat);
  EXPECT_EQ(a.labels.scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(a.inputs.view({3, 784}), b.inputs));
  EXPECT_TRUE(torch::equal(a.labels.slice(0, 0, 2), torch::tensor({9, 2}, torch::kLong)));
  EXPECT_TRUE(torch::equal(images->labels({0, 1, 9999}), a.labels));
  expectError([&] { images->get({10000}); }, {"fashion-mnist", "10000"});
}

TEST(FashionMnist, RefusesModelsItCannotFeed) {
  for (const InputSpec& bad : {InputSpec{InputKind::kImage, {3, 32, 32}, 10}, InputSpec{InputKind::kImage, {784}, 10},
                               InputSpec{InputKind::kFeatures, {1, 28, 28}, 10},
                               InputSpec{InputKind::kTokens, {784}, 10}, InputSpec{InputKind::kImage, {1, 28, 28}, 100}}) {
    expectError([&] { open("fashion-mnist", "train", bad); }, {"fashion-mnist", "(1, 28, 28)", "(784)", "synthetic"});
  }
  expectError([&] { open("fashion-mnist", "train", InputSpec{InputKind::kImage, {3, 32, 32}, 10}); },
              {"image (3, 32, 32), 10 classes"});
}

TEST(FashionMnist, MissingPackageSaysHowToInstall) {
  expectError([&] { open("fashion-mnist", "train", kImage, "/nonexistent/fmnist"); },
              {"/nonexistent/fmnist", "apt-get install dataset-fashion-mnist"});
}

// ---- Fashion-MNIST, files made here ---------------------------------------------------

void writeGz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(f);
}

// An IDX file: magic, big-endian dims, then `fill` for every element.
std::vector<uint8_t> idx(uint32_t magic, const std::vector<uint32_t>& dims, uint8_t fill) {
  std::vector<uint8_t> out;
  size_t elements = 1;
  for (uint32_t word : std::vector<uint32_t>{magic}) dims.empty() ? void() : void(word);
  auto put = [&](uint32_t w) { for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(w >> s)); };
  put(magic);
  for (uint32_t d : dims) put(d), elements *= d;
  out.insert(out.end(), elements, fill);
  return out;
}

class FashionMnistFiles : public TempDir {
 protected:
  void write(uint32_t n_images, uint32_t side, uint32_t n_labels, uint8_t label) {
    writeGz(images(), idx(0x803, {n_images, side, side}, 255));
    writeGz(labels(), idx(0x801, {n_labels}, label));
  }
  std::unique_ptr<Dataset> openHere() { return open("fashion-mnist", "test", kImage, dir_.string()); }
  std::string images() const { return path("t10k-images-idx3-ubyte.gz"); }
  std::string labels() const { return path("t10k-labels-idx1-ubyte.gz"); }
};

TEST_F(FashionMnistFiles, ValidFilesLoadAndNormalise) {
  write(5, 28, 5, 7);
  const auto data = openHere();
  ASSERT_EQ(data->size(), 5);
  const Batch b = data->get({4});
  EXPECT_FLOAT_EQ(b.inputs[0][0][27][27].item<float>(), static_cast<float>((1.0 - 0.2860) / 0.3530));
  EXPECT_EQ(b.labels[0].item<int64_t>(), 7);
}

TEST_F(FashionMnistFiles, BadFilesAreNamed) {
  write(5, 32, 5, 1);
  expectError([&] { openHere(); }, {images(), "32x32", "28x28"});
  write(5, 28, 4, 1);
  expectError([&] { openHere(); }, {labels(), "4 labels", "5 images"});
  write(5, 28, 5, 10);
  expectError([&] { openHere(); }, {labels(), "label 10"});
  writeGz(images(), idx(0x801, {5}, 0));
  expectError([&] { openHere(); }, {images(), "magic", "0x00000801", "0x00000803"});
  fs::remove(labels());
  expectError([&] { openHere(); }, {labels(), "apt-get install dataset-fashion-mnist"});
}

TEST_F(FashionMnistFiles, CorruptGzipIsNamed) {
  write(5, 28, 5, 1);
  std::ifstream in(images(), std::ios::binary);
  std::vector<char> gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  std::ofstream(images(), std::ios::binary | std::ios::trunc).write(gz.data(), static_cast<std::streamsize>(gz.size() / 2));
  expectError([&] { openHere(); }, {images(), "truncated"});
  gz[gz.size() - 8] ^= 0x5A;  // the CRC-32 in the gzip trailer
  std::ofstream(images(), std::ios::binary | std::ios::trunc).write(gz.data(), static_cast<std::streamsize>(gz.size()));
  expectError([&] { openHere(); }, {images(), "corrupt"});
}
