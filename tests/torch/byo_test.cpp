// Bringing your own model and data: TorchScript files and torch.save data written by
// Python (tests/byo/make_fixtures.py, run by CTest before this binary), trained on
// several ranks exactly as in one process, exported back, and refused when wrong.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include <caffe2/serialize/inline_container.h>

#include "pipetrain/torch/data.h"
#include "pipetrain/torch/profiler.h"
#include "pipetrain/util/process_memory.h"
#include "training_harness.h"

namespace pipetrain::runtime {
namespace {

TrainConfig byoConfig(const std::string& model_file) {
  TrainConfig c;
  c.model = model_file;  // names the model in failure messages
  c.model_file = fixture(model_file);
  c.data.file = fixture("data.pt");
  c.plan.microbatches = 4;
  c.plan.microbatch_size = 8;
  c.max_steps_per_epoch = 3;
  c.evaluate = false;
  c.threads = 1;
  return c;
}

void writeFile(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(ByoModel, ChainLayersAreTheScriptedChildren) {
  const models::Model model = openModel(byoConfig("model.pt"));
  ASSERT_EQ(model.layers.size(), 7u);
  EXPECT_EQ(model.layers.front().name, "0");
  EXPECT_EQ(model.layers.front().kind, "Linear");
  EXPECT_EQ(model.input.sample_shape, (std::vector<int64_t>{16}));
  EXPECT_EQ(model.input.num_classes, 4);
  // The layers' parameters are the TorchScript module's own tensors.
  EXPECT_EQ(model.parameters(0, 7).size(), 8u);
}

TEST(ByoModel, ChainTrainsExactlyAsOneProcess) {
  for (const char* schedule : {"1f1b", "gpipe", "zb-h1"}) {
    TrainConfig c = byoConfig("model.pt");
    usePlan(c, schedule, {1, 1, 1});
    expectMatchesReference(c);
  }
}

TEST(ByoModel, DagTrainsExactlyAsOneProcess) {
  // Every cut of the two-branch model: after `wide` its output crosses (`deep` reads the
  // model input from the data), after `deep` the two branch outputs (a pack).
  for (const auto& bounds : std::vector<std::vector<int>>{{0, 1, 3}, {0, 2, 3}, {0, 1, 2, 3}}) {
    TrainConfig c = byoConfig("dag_model.pt");
    const models::Model model = openModel(c);
    ASSERT_EQ(model.layers.size(), 3u);
    std::vector<std::string> names;
    for (const auto& l : model.layers) names.push_back(l.name);
    c.plan = plan::chainPlan(names, bounds, {}, c.plan.schedule, c.plan.microbatch_size, c.plan.microbatches);
    expectMatchesReference(c);
  }
}

// Inputs by name (a padding mask beside the ids): the data file lists the mask first,
// forward() takes the ids first, and every layer after the embedding reads the mask,
// which each stage holding one reads from the data, never from a message.
TEST(ByoModel, NamedInputsTrainExactlyAsOneProcess) {
  TrainConfig c = byoConfig("masked_encoder.pt");
  c.data.file = fixture("named.pt");
  const models::Model model = openModel(c);
  ASSERT_EQ(model.input.named.size(), 2u);
  EXPECT_EQ(model.input.named[0].name, "attention_mask");
  EXPECT_EQ(model.input.named[0].range, 2);
  EXPECT_EQ(model.input.named[1].range, 16);
  ASSERT_EQ(model.layers.size(), 4u);
  EXPECT_TRUE(model.layers[0].inputs.empty());
  EXPECT_EQ(model.layers[1].inputs, (std::vector<std::string>{"embed", models::kModelInput}));
  // The planner's graph is a chain: the mask is no edge.
  EXPECT_EQ(model.layerGraph().layers()[1].inputs, (std::vector<std::string>{"embed"}));
  for (const auto& bounds : std::vector<std::vector<int>>{{0, 1, 4}, {0, 2, 4}, {0, 1, 2, 3, 4}}) {
    std::vector<std::string> names;
    for (const auto& l : model.layers) names.push_back(l.name);
    c.plan = plan::chainPlan(names, bounds, {}, c.plan.schedule, c.plan.microbatch_size, c.plan.microbatches);
    expectMatchesReference(c);
  }
  // One input by name: the first layer reads the pack (fp32) back as int64 ids.
  TrainConfig one = byoConfig("ids_only.pt");
  one.data.file = fixture("named_one.pt");
  usePlan(one, "1f1b", {1, 1});
  expectMatchesReference(one);
  // Data whose names are not forward()'s, before any training.
  c10::Dict<std::string, torch::Tensor> dict;
  dict.insert("input_ids", torch::zeros({20, 8}, torch::kLong));
  dict.insert("labels", torch::zeros({20}, torch::kLong));
  const std::string path = ::testing::TempDir() + "byo_named.pt";
  writeFile(path, torch::pickle_save(dict));
  c.data.file = path;
  const std::string missing = errorOf([&] { openModel(c); });
  EXPECT_NE(missing.find("takes 'attention_mask', which the data does not hold (it holds input_ids)"),
            std::string::npos) << missing;
  dict.insert("attention_mask", torch::ones({20, 8}, torch::kLong));
  dict.insert("token_type_ids", torch::zeros({20, 8}, torch::kLong));
  writeFile(path, torch::pickle_save(dict));
  const std::string extra = errorOf([&] { openModel(c); });
  EXPECT_NE(extra.find("the data holds 'token_type_ids', which its forward() does not take"), std::string::npos)
      << extra;
  EXPECT_EQ(dict.erase("token_type_ids"), 1u);
  dict.insert("test_mask", torch::zeros({20, 8}, torch::kLong));
  writeFile(path, torch::pickle_save(dict));
  EXPECT_NE(errorOf([&] { openModel(c); }).find("'test_mask' is a test split of no input"), std::string::npos);
  EXPECT_EQ(dict.erase("test_mask"), 1u);
  dict.insert_or_assign("input_ids", torch::full({20, 8}, int64_t{1} << 25));
  writeFile(path, torch::pickle_save(dict));
  EXPECT_NE(errorOf([&] { openModel(c); }).find("integers outside [0, 2^24)"), std::string::npos);
  // A model of one input given named data, and the reverse.
  dict.insert_or_assign("input_ids", torch::zeros({20, 8}, torch::kLong));
  writeFile(path, torch::pickle_save(dict));
  c.model_file = fixture("model.pt");
  EXPECT_NE(errorOf([&] { openModel(c); }).find("takes one input, and the data holds several by name"),
            std::string::npos);
  c.model_file = fixture("masked_encoder.pt");
  c.data.file = fixture("data.pt");
  EXPECT_NE(errorOf([&] { openModel(c); }).find("takes inputs by name (input_ids, attention_mask)"),
            std::string::npos);
  std::remove(path.c_str());
}

TEST(ByoModel, ReplicatedStagesOverGlooMatchToo) {
  TrainConfig c = byoConfig("dag_model.pt");
  usePlan(c, "1f1b", {2, 1});
  expectMatchesReference(c, Wire::kGloo);
}

TEST(ByoModel, ExportWritesTheTrainedWeightsBack) {
  TrainConfig c = byoConfig("dag_model.pt");
  usePlan(c, "1f1b", {1, 1});
  c.export_path = ::testing::TempDir() + "byo_export.pt";
  std::remove(c.export_path.c_str());
  runInProcess(c, 2);
  const models::Model reference = trainReference(c);
  TrainConfig exported = c;
  exported.model_file = c.export_path;
  const models::Model trained = openModel(exported);
  const int n = static_cast<int>(trained.layers.size());
  EXPECT_LT(relativeError(trained.parameters(0, n), reference.parameters(0, n)), 1e-5);
  EXPECT_GT(relativeError(openModel(c).parameters(0, n), reference.parameters(0, n)), 1e-4);
  std::remove(c.export_path.c_str());
}

TEST(ByoModel, HeldOutSplitComesFromTheFile) {
  data::DataOptions options;
  options.file = fixture("data.pt");
  const models::InputSpec spec = data::inputSpecOfFile(options.file);
  EXPECT_EQ(data::openDataset(options, spec)->size(), 3584);
  options.split = "test";
  EXPECT_EQ(data::openDataset(options, spec)->size(), 512);
}

TEST(ByoModel, WithoutATestSplitEveryTenthSampleIsHeldOut) {
  c10::Dict<std::string, torch::Tensor> dict;
  dict.insert("inputs", torch::arange(50, torch::kFloat).reshape({25, 2}));
  dict.insert("labels", torch::arange(25) % 3);
  const std::string path = ::testing::TempDir() + "byo_split.pt";
  writeFile(path, torch::pickle_save(dict));
  data::DataOptions options;
  options.file = path;
  const models::InputSpec spec = data::inputSpecOfFile(path);
  EXPECT_EQ(spec.num_classes, 3);
  EXPECT_EQ(data::openDataset(options, spec)->size(), 23);
  options.split = "test";
  const auto test = data::openDataset(options, spec);
  ASSERT_EQ(test->size(), 2);
  EXPECT_TRUE(test->get({0, 1}).labels.equal(torch::tensor({9 % 3, 19 % 3})));
  std::remove(path.c_str());
}

// Sharded files: data-00000.pt, data-00001.pt, ... read one after the other, each with
// its own held-out split; the order takes the shards in turn, every sample once an epoch.
TEST(ByoModel, ShardedFilesAreReadInTurn) {
  const std::string dir = ::testing::TempDir() + "byo_shards_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::vector<int64_t> rows = {20, 30, 10};
  int64_t first_row = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    c10::Dict<std::string, torch::Tensor> dict;
    dict.insert("inputs", torch::arange(first_row, first_row + rows[i], torch::kFloat).reshape({rows[i], 1}));
    dict.insert("labels", torch::full({rows[i]}, static_cast<int64_t>(i)));
    char name[32];
    std::snprintf(name, sizeof name, "/data-%05zu.pt", i);
    writeFile(dir + name, torch::pickle_save(dict));
    first_row += rows[i];
  }
  data::DataOptions options;
  options.file = dir + "/data-00000.pt";
  EXPECT_EQ(data::shardsOf(options.file).size(), 3u);
  EXPECT_TRUE(data::shardsOf(dir + "/data-00001.pt").empty());  // the first names them all
  const models::InputSpec spec = data::inputSpecOfFile(options.file);
  EXPECT_EQ(spec.num_classes, 3);  // the classes of every shard
  const auto train = data::openDataset(options, spec);
  EXPECT_EQ(train->shardSizes(), (std::vector<int64_t>{18, 27, 9}));  // every tenth held out, per shard
  // The order reads a shard whole before the next, and every sample once.
  const data::SampleOrder order = data::sampleOrder(options, train.get(), train->size(), 5, 0);
  std::vector<int64_t> seen, shards_read;
  for (int64_t k = 0; k < order.minibatchesPerEpoch(3, 1); ++k) {
    const std::vector<int64_t> mb = order.microbatch(k, 0, 3, 1);
    seen.insert(seen.end(), mb.begin(), mb.end());
    const torch::Tensor labels = train->labels(mb);
    for (int64_t r = 0; r < labels.size(0); ++r)
      if (shards_read.empty() || shards_read.back() != labels[r].item<int64_t>())
        shards_read.push_back(labels[r].item<int64_t>());
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen.size(), 54u);
  EXPECT_EQ(std::unique(seen.begin(), seen.end()), seen.end());
  EXPECT_EQ(shards_read.size(), 3u);  // each shard entered once
  // A sample is its shard's row: index 18 is shard 1's first kept row (file row 20).
  EXPECT_EQ(train->get({18}).inputs.item<float>(), 20.0f);
  options.split = "test";
  EXPECT_EQ(data::openDataset(options, spec)->size(), 2 + 3 + 1);
  std::filesystem::remove_all(dir);
}

// A data file's samples are its pages, mapped: opening it for its shape or for training
// copies none of it (reading it copied it two to six times, and glibc kept the copies).
TEST(ByoModel, ADataFileIsServedFromItsPagesNotCopies) {
  constexpr int64_t kRows = 1 << 17, kWidth = 64;  // 32 MiB of float inputs
  const torch::Tensor inputs = torch::rand({kRows, kWidth});
  c10::Dict<std::string, torch::Tensor> dict;
  dict.insert("inputs", inputs);
  dict.insert("labels", torch::arange(kRows) % 7);
  const std::string path = ::testing::TempDir() + "byo_mapped.pt";
  writeFile(path, torch::pickle_save(dict));
  const int64_t file_bytes = kRows * kWidth * 4;
  auto anonymous = [] { return util::residentBytes() - util::residentFileBytes(); };
  const int64_t anonymous_before = anonymous(), file_before = util::residentFileBytes();
  data::DataOptions options;
  options.file = path;
  const models::InputSpec spec = data::inputSpecOfFile(path);
  EXPECT_EQ(spec.num_classes, 7);
  const auto train = data::openDataset(options, spec);
  options.split = "test";
  const auto test = data::openDataset(options, spec);
  EXPECT_EQ(train->size() + test->size(), kRows);
  EXPECT_LT(anonymous() - anonymous_before, file_bytes / 8);
  // Its pages are read in as it opens (the planner prices a dataset from there), once for
  // both splits.
  EXPECT_GT(util::residentFileBytes() - file_before, file_bytes * 9 / 10);
  EXPECT_LT(util::residentFileBytes() - file_before, file_bytes * 3 / 2);
  EXPECT_TRUE(test->get({0, 3}).inputs.equal(inputs.index_select(0, torch::tensor({9, 39}))));
  EXPECT_TRUE(train->get({8, 9}).inputs.equal(inputs.index_select(0, torch::tensor({8, 10}))));
  std::remove(path.c_str());
}

// Copies the torch.save archive `from` to `to`, record by record, letting `change` alter
// each record's bytes and whether it is stored compressed.
void rewriteArchive(const std::string& from, const std::string& to,
                    const std::function<void(const std::string&, std::string&, bool&)>& change) {
  caffe2::serialize::PyTorchStreamReader reader(from);
  caffe2::serialize::PyTorchStreamWriter writer(to);
  for (const std::string& name : reader.getAllRecords()) {
    if (name == "version" || name == ".data/version") continue;  // the writer writes its own
    const auto [data, size] = reader.getRecord(name);
    std::string bytes(static_cast<const char*>(data.get()), size);
    bool compress = false;
    change(name, bytes, compress);
    writer.writeRecord(name, bytes.data(), bytes.size(), compress);
  }
  writer.writeEndOfFile();
}

TEST(ByoModel, ADataFileWithCompressedRecordsIsReadAndOneWithShortRecordsRefused) {
  c10::Dict<std::string, torch::Tensor> dict;
  const torch::Tensor inputs = torch::arange(200, torch::kFloat).reshape({50, 4});
  dict.insert("inputs", inputs);
  dict.insert("labels", torch::arange(50) % 5);
  const std::string path = ::testing::TempDir() + "byo_records.pt", changed = ::testing::TempDir() + "byo_changed.pt";
  writeFile(path, torch::pickle_save(dict));
  // Compressed (torch.save never compresses; a re-zipped file may): copied out, not mapped.
  rewriteArchive(path, changed, [](const std::string& name, std::string&, bool& compress) {
    compress = name.rfind("data/", 0) == 0;
  });
  data::DataOptions options;
  options.file = changed;
  const auto train = data::openDataset(options, data::inputSpecOfFile(changed));
  EXPECT_TRUE(train->get({0, 9}).inputs.equal(inputs.index_select(0, torch::tensor({0, 10}))));
  // A record shorter than the storage its pickle describes would be read past its end.
  rewriteArchive(path, changed, [](const std::string& name, std::string& bytes, bool&) {
    if (name == "data/0") bytes.resize(bytes.size() / 2);
  });
  const std::string error = errorOf([&] { data::inputSpecOfFile(changed); });
  EXPECT_NE(error.find("byo_changed.pt"), std::string::npos) << error;
  EXPECT_NE(error.find("its record in the archive holds"), std::string::npos) << error;
  std::remove(path.c_str());
  std::remove(changed.c_str());
}

TEST(ByoModel, RegressionTargetsTrainWithMeanSquaredError) {
  c10::Dict<std::string, torch::Tensor> dict;
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({200, 16});
  dict.insert("inputs", x);
  dict.insert("labels", x.narrow(1, 0, 4) * 0.5);  // (N, 4) float targets
  const std::string path = ::testing::TempDir() + "byo_regression.pt";
  writeFile(path, torch::pickle_save(dict));
  TrainConfig c = byoConfig("model.pt");
  c.data.file = path;
  // SGD: Adam divides by the gradients' running magnitude and so magnifies rounding
  // where gradients are tiny; this test is about the loss, not the optimizer.
  c.optimizer.name = "sgd";
  c.lr = 0.05;
  EXPECT_EQ(openModel(c).input.loss, models::LossKind::kMeanSquaredError);
  // The profile prices the loss on float targets of the output's shape (NOTE(loss)).
  EXPECT_GT(profiler::profileModel(openModel(c), 8, {1, 1, "sgd"}).layers().back().forward_seconds, 0);
  usePlan(c, "1f1b", {1, 1});
  expectMatchesReference(c);
  std::remove(path.c_str());
}

TEST(ByoModel, RefusesWhatItCannotTrain) {
  TrainConfig c = byoConfig("hidden_step.pt");
  const std::string hidden = errorOf([&] { openModel(c); });
  EXPECT_NE(hidden.find("does not reproduce forward()"), std::string::npos) << hidden;
  EXPECT_NE(hidden.find("python/pipetrain_capture.py"), std::string::npos) << hidden;  // what to do instead
  const std::string looped = errorOf([&] { openModel(byoConfig("module_list.pt")); });
  EXPECT_NE(looped.find("child 'h' is a ModuleList, a container with no forward() of its own"), std::string::npos) << looped;
  EXPECT_EQ(looped.find("frame #"), std::string::npos) << looped;
  // What is not TorchScript says what it is and how to save the model instead, without
  // the loader's C++ stack frames.
  for (const char* file : {"not_a_model.pt", "state_dict.pt", "pickled_module.pt"}) {
    c.model_file = fixture(file);
    const std::string error = errorOf([&] { openModel(c); });
    EXPECT_NE(error.find("not a TorchScript file"), std::string::npos) << error;
    EXPECT_NE(error.find("torch.jit.script(model).save"), std::string::npos) << error;
    EXPECT_EQ(error.find("frame #"), std::string::npos) << error;
  }
  for (const char* file : {"state_dict.pt", "pickled_module.pt"})
    EXPECT_NE(errorOf([&] { openModel(byoConfig(file)); }).find("written by torch.save"), std::string::npos) << file;
  // Python source given as the model: how to capture it.
  const std::string source = ::testing::TempDir() + "byo_model.py";
  writeFile(source, {'i', 'm', 'p', 'o', 'r', 't', ' ', 't', 'o', 'r', 'c', 'h', '\n'});
  c.model_file = source;
  const std::string python = errorOf([&] { openModel(c); });
  EXPECT_NE(python.find("pipetrain_capture.py capture '" + source + ":MyModel()'"), std::string::npos) << python;
  std::remove(source.c_str());
  c.model_file = fixture("missing.pt");
  EXPECT_NE(errorOf([&] { openModel(c); }).find("no such file"), std::string::npos);
  c.model_file = fixture("model.pt");
  c.data.file = "";
  EXPECT_NE(errorOf([&] { openModel(c); }).find("needs --data-file"), std::string::npos);
  c.data.file = fixture("model.pt");  // a zip archive, but not a dict of tensors
  EXPECT_NE(errorOf([&] { openModel(c); }).find("data file"), std::string::npos);

  // Inputs of the wrong width: the first layer's error names it and the shape.
  c10::Dict<std::string, torch::Tensor> dict;
  dict.insert("inputs", torch::zeros({20, 5}));
  dict.insert("labels", torch::zeros({20}, torch::kLong));
  const std::string path = ::testing::TempDir() + "byo_narrow.pt";
  writeFile(path, torch::pickle_save(dict));
  c.data.file = path;
  const std::string narrow = errorOf([&] { openModel(c); });
  EXPECT_NE(narrow.find("child '0' fails on its inputs"), std::string::npos) << narrow;
  // Labels beyond the model's classes.
  dict.insert_or_assign("inputs", torch::zeros({20, 16}));
  dict.insert_or_assign("labels", torch::full({20}, 7, torch::kLong));
  writeFile(path, torch::pickle_save(dict));
  EXPECT_NE(errorOf([&] { openModel(c); }).find("does not fit the data's labels"), std::string::npos);
  // Labels that do not match the inputs' rows.
  dict.insert_or_assign("labels", torch::zeros({19}, torch::kLong));
  writeFile(path, torch::pickle_save(dict));
  EXPECT_NE(errorOf([&] { openModel(c); }).find("one row per sample"), std::string::npos);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace pipetrain::runtime
