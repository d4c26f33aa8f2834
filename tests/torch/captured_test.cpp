// Models as their authors wrote them, captured by python/pipetrain_capture.py
// (tests/byo/make_fixtures.py): a GPT-2-style model whose output layer shares the token
// embedding's weight, a torchvision ResNet, and a model whose first block hands on two
// tensors that later layers read (as T5's first block does its position bias). They train on any cut exactly as in one
// process, the tied copies stay equal across stages, and one step equals PyTorch's own
// step of the model as written.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>

#include "pipetrain/plan/partition.h"
#include "training_harness.h"

namespace pipetrain::runtime {
namespace {

TrainConfig capturedConfig(const std::string& model_file, const std::string& data_file) {
  TrainConfig c;
  c.model = model_file;
  c.model_file = fixture(model_file);
  c.data.file = fixture(data_file);
  c.plan.microbatches = 4;
  c.plan.microbatch_size = 4;
  c.max_steps_per_epoch = 3;
  c.evaluate = false;
  c.threads = 1;
  c.optimizer.name = "sgd";  // linear in the gradient: 1e-5 holds (training_harness.h)
  c.lr = 0.05;
  return c;
}

// The two copies of the tied weight: the token embedding's and the output layer's.
std::pair<torch::Tensor, torch::Tensor> tiedCopies(const models::Model& model) {
  EXPECT_EQ(model.tied.size(), 1u);
  const auto& holders = model.tied.at(0).holders;
  EXPECT_EQ(model.layers.at(holders.at(0).layer).name, "transformer_wte");
  EXPECT_EQ(model.layers.at(holders.at(1).layer).name, "lm_head");
  return {models::heldParameter(model, holders[0]), models::heldParameter(model, holders[1])};
}

TEST(CapturedModel, GptLayersAreItsModulesWithTheTieFound) {
  const models::Model model = openModel(capturedConfig("gpt_tied.pt", "tokens.pt"));
  std::vector<std::string> names;
  for (const auto& l : model.layers) names.push_back(l.name);
  EXPECT_EQ(names, (std::vector<std::string>{"transformer_wte", "transformer_wpe", "transformer_drop",
                                             "transformer_h_0", "transformer_h_1", "transformer_ln_f", "lm_head"}));
  EXPECT_EQ(model.layers[3].kind, "Block");
  const auto [embedding, output] = tiedCopies(model);
  // Copies, equal: each stage steps its own.
  EXPECT_NE(embedding.data_ptr(), output.data_ptr());
  EXPECT_TRUE(torch::equal(embedding, output));
}

TEST(CapturedModel, TiedWeightsStepAsPyTorchStepsTheOneSharedWeight) {
  const TrainConfig c = capturedConfig("gpt_tied.pt", "tokens.pt");
  models::Model model = openModel(c);
  std::ifstream in(fixture("tokens.pt"), std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto data = torch::pickle_load(bytes).toGenericDict();
  const torch::Tensor x = data.at("inputs").toTensor().narrow(0, 0, 8);
  const torch::Tensor y = data.at("labels").toTensor().narrow(0, 0, 8);
  const int n = static_cast<int>(model.layers.size());
  models::lossOf(model, models::forwardModel(model, x), y).backward();
  models::sumTiedGradients(model);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model.parameters(0, n)) p.sub_(p.grad() * 0.05);
  }
  const models::Model stepped = openModel(capturedConfig("gpt_tied_stepped.pt", "tokens.pt"));
  EXPECT_LT(relativeError(model.parameters(0, n), stepped.parameters(0, n)), 1e-5);
  const auto [embedding, output] = tiedCopies(model);
  EXPECT_TRUE(torch::equal(embedding, output));
}

TEST(CapturedModel, GptTrainsExactlyAsOneProcessWhereverTheTieFalls) {
  struct Case {
    std::string schedule;
    std::vector<int> replicas;
    int chunks;
    bool gloo;
  };
  // Embedding and output layer on the first and last of 3 ranks; on one rank (a V);
  // on ranks 0 and 1 of a loop; with the last stage replicated, over Gloo.
  for (const Case& k : std::vector<Case>{{"1f1b", {1, 1, 1}, 1, false},
                                         {"zb-v", {1, 1}, 1, false},
                                         {"interleaved", {1, 1}, 2, false},
                                         {"gpipe", {1, 2}, 1, true}}) {
    TrainConfig c = capturedConfig("gpt_tied.pt", "tokens.pt");
    usePlan(c, k.schedule, k.replicas, k.chunks);
    expectMatchesReference(c, k.gloo ? Wire::kGloo : Wire::kInProcess);
    // Every rank matched the reference, whose copies are equal: so are the ranks'.
    const models::Model reference = trainReference(c);
    const auto [embedding, output] = tiedCopies(reference);
    EXPECT_TRUE(torch::allclose(embedding, output, 0, 0)) << k.schedule;
    // The staleness replay (what calibration trains a rule with) sums the tie too.
    const int n = static_cast<int>(reference.layers.size());
    EXPECT_LT(relativeError(trainStalenessReference(c).parameters(0, n), reference.parameters(0, n)), 1e-5)
        << k.schedule;
  }
}

TEST(CapturedModel, TiedLayersOnTwoStagesRefuseAnAsynchronousSchedule) {
  TrainConfig c = capturedConfig("gpt_tied.pt", "tokens.pt");
  usePlan(c, "pipedream", {1, 1});
  const std::string error = errorOf([&] { runInProcess(c, 2); });
  EXPECT_NE(error.find("'transformer_wte' and 'lm_head' share a weight"), std::string::npos) << error;
  EXPECT_NE(error.find("synchronous schedule"), std::string::npos) << error;
}

TEST(CapturedModel, ResNetTrainsExactlyAsOneProcess) {
  // One micro-batch per mini-batch: BatchNorm normalises over what it is given, so a
  // pipeline's smaller micro-batches would normalise differently (as in GPipe).
  for (const auto& replicas : std::vector<std::vector<int>>{{1, 1}, {1, 1, 1}}) {
    TrainConfig c = capturedConfig("resnet.pt", "images.pt");
    c.plan.microbatches = 1;
    c.plan.microbatch_size = 8;
    usePlan(c, "1f1b", replicas);
    expectMatchesReference(c);
  }
}

// A layer with two outputs: the first block's hidden states and a bias that every later
// block reads. Each is an edge of the layer DAG, and both travel to later stages in one
// message per cut, whichever stage reads them.
TEST(CapturedModel, ALayerWithTwoOutputsTrainsExactlyAsOneProcess) {
  TrainConfig c = capturedConfig("shared_bias.pt", "data.pt");
  const models::Model model = openModel(c);
  std::vector<std::string> names;
  for (const auto& l : model.layers) names.push_back(l.name);
  ASSERT_EQ(names.front(), "first");
  for (const auto& bounds : std::vector<std::vector<int>>{{0, 1, 4}, {0, 2, 4}, {0, 1, 2, 3, 4}}) {
    c.plan = plan::chainPlan(names, bounds, {}, c.plan.schedule, c.plan.microbatch_size, c.plan.microbatches);
    expectMatchesReference(c);
  }
}

TEST(CapturedModel, AStageMayStartWithAnInPlaceActivation) {
  TrainConfig c = capturedConfig("inplace_chain.pt", "data.pt");
  const models::Model model = openModel(c);
  std::vector<std::string> names;
  for (const auto& l : model.layers) names.push_back(l.name);
  c.plan = plan::chainPlan(names, {0, 1, 3}, {}, c.plan.schedule, c.plan.microbatch_size, c.plan.microbatches);
  expectMatchesReference(c);
}

// Clipping by the whole model's norm counts the tied weight once, as
// clip_grad_norm_(model.parameters()) does (parameters() lists a shared weight once),
// wherever its copies sit: the first step's norm is the one-process norm, and the run
// matches the one-process reference.
TEST(CapturedModel, ClippingCountsTheTiedWeightOnce) {
  TrainConfig c = capturedConfig("gpt_tied.pt", "tokens.pt");
  c.clip_grad_norm = 0.05;
  // The first mini-batch's gradient in one process, the tie summed.
  models::Model model = openModel(c);
  const auto train = data::openDataset(c.data, model.input);
  const data::SampleOrder order(train->size(), c.seed, 0);
  std::vector<int64_t> first;
  for (int j = 0; j < c.plan.microbatches; ++j) {
    const auto mb = order.microbatch(0, j, c.plan.microbatch_size, c.plan.microbatches);
    first.insert(first.end(), mb.begin(), mb.end());
  }
  const data::Batch batch = train->get(first);
  const int n = static_cast<int>(model.layers.size());
  models::lossOf(model, models::forwardModel(model, batch.inputs), batch.labels).backward();
  models::sumTiedGradients(model);
  const auto [embedding, output] = tiedCopies(model);
  double once = 0;
  for (const auto& p : model.parameters(0, n))
    if (!p.is_same(output)) once += p.grad().pow(2).sum().item<double>();
  const double twice = once + output.grad().pow(2).sum().item<double>();
  for (const auto& [schedule, replicas] : std::vector<std::pair<std::string, std::vector<int>>>{
           {"1f1b", {1, 1, 1}}, {"zb-v", {1, 1}}, {"gpipe", {1, 2}}}) {
    SCOPED_TRACE(schedule);
    usePlan(c, schedule, replicas);
    expectMatchesReference(c);
    const std::vector<RankResult> results = runInProcess(c, rankCount(c), Wire::kInProcess);
    for (const RankResult& r : results) {
      ASSERT_FALSE(r.grad_norms.empty());
      EXPECT_NEAR(r.grad_norms[0], std::sqrt(once), 1e-5 * std::sqrt(once)) << "rank " << r.rank;
    }
    EXPECT_GT(std::sqrt(twice), std::sqrt(once) * (1 + 1e-3));  // counting it twice would show
  }
}

}  // namespace
}  // namespace pipetrain::runtime
