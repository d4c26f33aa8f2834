// Datasets and sample order: the real Debian data sets load with their known sizes and
// values, bad files and shapes fail with a message naming the file and the fix, and
// every sample and every order is a pure function of its seed.
#include "pipetrain/torch/data.h"

#include <unistd.h>
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
using models::LossKind;
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
  const std::vector<InputSpec> bad_inputs{
      {InputKind::kImage, {3, 32, 32}, 10}, {InputKind::kImage, {784}, 10}, {InputKind::kFeatures, {1, 28, 28}, 10},
      {InputKind::kTokens, {784}, 10}, {InputKind::kImage, {1, 28, 28}, 100}};
  for (const InputSpec& bad : bad_inputs) {
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
  auto put = [&](uint32_t w) { for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(w >> s)); };
  put(magic);
  for (uint32_t d : dims) {
    put(d);
    elements *= d;
  }
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
  auto rewrite = [&](size_t bytes) {
    std::ofstream(images(), std::ios::binary | std::ios::trunc).write(gz.data(), static_cast<std::streamsize>(bytes));
  };
  rewrite(gz.size() / 2);
  expectError([&] { openHere(); }, {images(), "truncated"});
  gz[gz.size() - 8] ^= 0x5A;  // the CRC-32 in the gzip trailer
  rewrite(gz.size());
  expectError([&] { openHere(); }, {images(), "corrupt"});
}

// ---- fortunes ---------------------------------------------------------------------------

const InputSpec kBytes8{InputKind::kTokens, {8}, 256};

// Byte k of the corpus is k, so every window says where it came from.
class FortunesFiles : public TempDir {
 protected:
  void SetUp() override {
    TempDir::SetUp();
    auto put = [&](const std::string& name, int first, int last) {
      std::ofstream out(path(name), std::ios::binary);
      for (int k = first; k < last; ++k) out.put(static_cast<char>(k));
    };
    put("b", 100, 200);
    put("a", 0, 100);  // written second, read first: the order is by name
    put("a.dat", 250, 256);
    fs::create_symlink(path("a"), path("a.u8"));
  }
};

TEST_F(FortunesFiles, WindowsAreShiftedAndSplitsDisjoint) {
  const auto train = open("fortunes", "train", kBytes8, dir_.string());
  const auto test = open("fortunes", "test", kBytes8, dir_.string());
  ASSERT_EQ(train->size(), 22);  // bytes [0, 180): (180 - 1) / 8 windows
  ASSERT_EQ(test->size(), 2);    // bytes [180, 200): (20 - 1) / 8
  const Batch first = train->get({0, 21});
  EXPECT_TRUE(torch::equal(first.inputs[0], torch::arange(0, 8, torch::kLong)));
  EXPECT_TRUE(torch::equal(first.labels[1], torch::arange(169, 177, torch::kLong)));
  const Batch t = test->get({0, 1});
  EXPECT_TRUE(torch::equal(t.inputs[0], torch::arange(180, 188, torch::kLong)));
  EXPECT_EQ(t.labels.max().item<int64_t>(), 196);  // no .dat byte (250+), no second copy of "a"
  EXPECT_TRUE(torch::equal(test->labels({1, 0}), t.labels.flip(0)));
}

TEST(Fortunes, RealCorpusServesNextByteWindows) {
  const InputSpec spec{InputKind::kTokens, {64}, 256};
  const auto train = open("fortunes", "train", spec);
  const auto test = open("fortunes", "test", spec);
  EXPECT_GT(train->size(), 30000);  // a few MiB of text
  EXPECT_NEAR(static_cast<double>(test->size()) / train->size(), 1.0 / 9, 0.01);
  const Batch b = train->get({0, 1, train->size() - 1});
  EXPECT_EQ(b.inputs.sizes(), (std::vector<int64_t>{3, 64}));
  EXPECT_EQ(b.labels.scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(b.inputs.slice(1, 1), b.labels.slice(1, 0, 63)));  // labels = next bytes
  EXPECT_EQ(b.labels[0][63].item<int64_t>(), b.inputs[1][0].item<int64_t>());  // windows are adjacent
  EXPECT_TRUE(torch::equal(train->labels({0, 1}), b.labels.slice(0, 0, 2)));
}

TEST(Fortunes, RefusesWrongVocabularyAndMissingPackage) {
  expectError([&] { open("fortunes", "train", InputSpec{InputKind::kTokens, {8}, 100}); }, {"fortunes", "256"});
  expectError([&] { open("fortunes", "train", kImage); }, {"fortunes", "token"});
  expectError([&] { open("fortunes", "train", kBytes8, "/nonexistent/fortunes"); },
              {"/nonexistent/fortunes", "apt-get install fortunes"});
}

// ---- synthetic -----------------------------------------------------------------------------

std::unique_ptr<Dataset> synthetic(const InputSpec& input, uint64_t seed, const std::string& split = "train") {
  DataOptions o;
  o.split = split;
  o.seed = seed;
  o.synthetic_size = 100;
  return openDataset(o, input);
}

TEST(Synthetic, SamplesArePureFunctionsOfSeedAndIndex) {
  const InputSpec spec{InputKind::kImage, {3, 32, 32}, 7};
  const auto a = synthetic(spec, 1);
  const Batch b = a->get({5, 2, 5});
  EXPECT_EQ(b.inputs.sizes(), (std::vector<int64_t>{3, 3, 32, 32}));
  EXPECT_TRUE(torch::equal(b.inputs[0], b.inputs[2]));
  EXPECT_FALSE(torch::equal(b.inputs[0], b.inputs[1]));
  const Batch again = synthetic(spec, 1)->get({2});  // another object, another order
  EXPECT_TRUE(torch::equal(again.inputs[0], b.inputs[1]));
  EXPECT_TRUE(torch::equal(a->labels({5, 2, 5}), b.labels));
  EXPECT_FALSE(torch::equal(synthetic(spec, 2)->get({5}).inputs[0], b.inputs[0]));
  EXPECT_FALSE(torch::equal(synthetic(spec, 1, "test")->get({5}).inputs[0], b.inputs[0]));
  expectError([&] { a->get({100}); }, {"synthetic", "100"});
}

TEST(Synthetic, InputsAreStandardNormalAndLabelsInRange) {
  const auto data = synthetic(InputSpec{InputKind::kFeatures, {2048}, 7}, 3);
  const Batch b = data->get(range(0, 100));
  EXPECT_NEAR(b.inputs.mean().item<double>(), 0.0, 0.01);
  EXPECT_NEAR(b.inputs.std().item<double>(), 1.0, 0.01);
  EXPECT_EQ(b.labels.min().item<int64_t>(), 0);
  EXPECT_EQ(b.labels.max().item<int64_t>(), 6);
}

TEST(Synthetic, TokensPredictTheNextToken) {
  const auto data = synthetic(InputSpec{InputKind::kTokens, {16}, 50}, 0);
  const Batch b = data->get({0, 99});
  EXPECT_EQ(b.inputs.sizes(), (std::vector<int64_t>{2, 16}));
  EXPECT_TRUE(torch::equal(b.inputs.slice(1, 1), b.labels.slice(1, 0, 15)));
  EXPECT_LT(b.inputs.max().item<int64_t>(), 50);
  EXPECT_TRUE(torch::equal(data->labels({0, 99}), b.labels));
}

// multimodal's input: k token streams side by side, one class label per sample.
TEST(Synthetic, IndicesLieBelowTheVocabulary) {
  const auto data = synthetic(InputSpec{InputKind::kIndices, {32}, 5, LossKind::kCrossEntropy, 40}, 0);
  const Batch b = data->get(range(0, 100));
  EXPECT_EQ(b.inputs.scalar_type(), torch::kLong);
  EXPECT_EQ(b.inputs.sizes(), (std::vector<int64_t>{100, 32}));
  EXPECT_EQ(b.inputs.min().item<int64_t>(), 0);
  EXPECT_EQ(b.inputs.max().item<int64_t>(), 39);
  EXPECT_EQ(b.labels.sizes(), (std::vector<int64_t>{100}));
  EXPECT_LT(b.labels.max().item<int64_t>(), 5);
  expectError([&] { synthetic(InputSpec{InputKind::kIndices, {32}, 5}, 0); }, {"synthetic", "vocab"});
}

TEST(OpenDataset, UnknownNamesAndSplitsAreRefused) {
  expectError([&] { open("cifar", "train", kImage); }, {"cifar", "fashion-mnist", "fortunes", "synthetic"});
  expectError([&] { open("synthetic", "validation", kImage); }, {"validation", "train", "test"});
  expectError([&] { synthetic(InputSpec{InputKind::kTokens, {4, 4}, 10}, 0); }, {"synthetic", "(4, 4)"});
}

// ---- sample order --------------------------------------------------------------------------

std::vector<int64_t> wholeOrder(const SampleOrder& order, int64_t size) {
  std::vector<int64_t> all;
  for (int64_t k = 0; k < size; ++k) all.push_back(order.microbatch(k, 0, 1, 1)[0]);
  return all;
}

TEST(SampleOrder, IsADeterministicPermutationPerEpoch) {
  const std::vector<int64_t> order = wholeOrder(SampleOrder(1000, 42, 0), 1000);
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, range(0, 1000));
  EXPECT_EQ(wholeOrder(SampleOrder(1000, 42, 0), 1000), order);
  EXPECT_NE(wholeOrder(SampleOrder(1000, 42, 1), 1000), order);
  EXPECT_NE(wholeOrder(SampleOrder(1000, 43, 0), 1000), order);
  // Pinned: mt19937_64 and our Fisher-Yates are fully specified, so every build agrees
  // (checked against an independent Python implementation of both).
  EXPECT_EQ(wholeOrder(SampleOrder(10, 0, 0), 10), (std::vector<int64_t>{7, 2, 0, 8, 3, 9, 6, 1, 5, 4}));
}

TEST(SampleOrder, MicrobatchesTileTheMinibatches) {
  const SampleOrder order(100, 7, 3);
  ASSERT_EQ(order.minibatchesPerEpoch(8, 4), 3);  // floor(100 / 32): the last 4 samples wait
  std::vector<int64_t> seen;
  for (int64_t k = 0; k < 3; ++k) {
    for (int j = 0; j < 4; ++j) {
      const std::vector<int64_t> mb = order.microbatch(k, j, 8, 4);
      ASSERT_EQ(mb.size(), 8u);
      seen.insert(seen.end(), mb.begin(), mb.end());
    }
  }
  const std::vector<int64_t> whole = wholeOrder(order, 100);
  EXPECT_EQ(seen, std::vector<int64_t>(whole.begin(), whole.begin() + 96));  // positions (k*m + j)*b..
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::unique(seen.begin(), seen.end()), seen.end());  // disjoint
  expectError([&] { order.microbatch(3, 0, 8, 4); }, {"mini-batch 3"});
  expectError([&] { order.microbatch(0, 4, 8, 4); }, {"micro-batch 4"});
}

TEST(SampleOrder, KeyedIsAPermutationThatHoldsNothing) {
  for (int64_t size : {1, 2, 3, 10, 63, 64, 65, 1000, 4097}) {
    const std::vector<int64_t> order = wholeOrder(SampleOrder(size, 42, 0, SampleOrder::Kind::kKeyed), size);
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, range(0, size)) << size;
  }
  const auto keyed = [](uint64_t seed, int64_t epoch) {
    return wholeOrder(SampleOrder(1000, seed, epoch, SampleOrder::Kind::kKeyed), 1000);
  };
  EXPECT_EQ(keyed(42, 0), keyed(42, 0));
  EXPECT_NE(keyed(42, 0), keyed(42, 1));
  EXPECT_NE(keyed(42, 0), keyed(43, 0));
  EXPECT_NE(keyed(42, 0), range(0, 1000));
  // Pinned, and what bench/recipe/gpt2_recipe.py computes in Python.
  EXPECT_EQ(wholeOrder(SampleOrder(10, 0, 0, SampleOrder::Kind::kKeyed), 10),
            (std::vector<int64_t>{1, 5, 0, 8, 3, 9, 7, 6, 2, 4}));
  // Billions of windows cost nothing to order.
  const SampleOrder huge(int64_t{5} << 32, 1, 0, SampleOrder::Kind::kKeyed);
  EXPECT_LT(huge.microbatch(123456789, 0, 4, 1)[3], int64_t{5} << 32);
}

// ---- token streams ---------------------------------------------------------------------------

std::string writeTokens(const fs::path& path, const std::vector<uint16_t>& tokens) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  return path.string();
}

TEST(TokenStream, WindowsOfTheContextWithTheNextTokensAsLabels) {
  const fs::path dir = fs::temp_directory_path() / ("pipetrain-tokens-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<uint16_t> tokens(1000);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 251);
  DataOptions o;
  o.file = writeTokens(dir / "stream.bin", tokens);
  ASSERT_TRUE(isTokenStream(o.file));
  const InputSpec gpt{InputKind::kTokens, {8}, 256};
  const auto train = openDataset(o, gpt);
  EXPECT_EQ(train->size(), (900 - 1) / 8);  // the first nine tenths
  const Batch b = train->get({0, 3});
  EXPECT_EQ(b.inputs.sizes(), (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(b.inputs[1][0].item<int64_t>(), 24);
  EXPECT_EQ(b.labels[1][7].item<int64_t>(), 32);  // the token after the window's last
  o.split = "test";
  const auto test = openDataset(o, gpt);
  EXPECT_EQ(test->size(), (100 - 1) / 8);
  EXPECT_EQ(test->get({0}).inputs[0][0].item<int64_t>(), 900 % 251);
  // nanoGPT's layout: val.bin beside train.bin is the test split.
  o.file = writeTokens(dir / "train.bin", tokens);
  writeTokens(dir / "val.bin", std::vector<uint16_t>(17, 5));
  EXPECT_EQ(openDataset(o, gpt)->size(), 2);
  o.split = "train";
  EXPECT_EQ(openDataset(o, gpt)->size(), (1000 - 1) / 8);
  // A model from a file learns its input from the stream and --context.
  o.context = 8;
  const InputSpec spec = inputSpecOf(o);
  EXPECT_EQ(spec.kind, InputKind::kTokens);
  EXPECT_EQ(spec.sample_shape, std::vector<int64_t>{8});
  EXPECT_EQ(spec.num_classes, 251);
  fs::remove_all(dir);
}

TEST(TokenStream, RefusesWhatItCannotServe) {
  const fs::path dir = fs::temp_directory_path() / ("pipetrain-tokens-bad-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  DataOptions o;
  o.file = writeTokens(dir / "big.bin", std::vector<uint16_t>(100, 300));
  const InputSpec gpt{InputKind::kTokens, {8}, 256};
  expectError([&] { openDataset(o, gpt)->get({0}); }, {"big.bin", "token 300", "vocabulary of 256"});
  expectError([&] { openDataset(o, kImage); }, {"token stream", "image"});
  expectError([&] { inputSpecOf(o); }, {"--context"});
  o.token_dtype = "int8";
  expectError([&] { openDataset(o, gpt); }, {"--token-dtype", "int8"});
  o.token_dtype = "uint32";
  std::ofstream(dir / "odd.bin", std::ios::binary).write("abcdef", 6);
  o.file = (dir / "odd.bin").string();
  expectError([&] { openDataset(o, gpt); }, {"odd.bin", "6 bytes", "--token-dtype"});
  o.token_dtype = "uint16";
  o.file = writeTokens(dir / "short.bin", std::vector<uint16_t>(9, 1));
  expectError([&] { openDataset(o, gpt); }, {"short.bin", "too few"});
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pipetrain::data
