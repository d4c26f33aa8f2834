// The profiler: per-layer profiles that agree with the model (one node per layer,
// parameter and output bytes, I + W against a timed full backward), leave the model and
// the global generator alone, and round-trip through the LayerGraph JSON; the network
// profile over the in-process transport and the cluster it implies.
#include "pipetrain/torch/profiler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <map>
#include <thread>

#include "pipetrain/plan/profile_shares.h"
#include "pipetrain/util/allocator.h"
#include "pipetrain/util/error.h"

namespace pipetrain::profiler {
namespace {

models::Model smallMlp() {
  return models::buildModel("mlp", {{"input", 128}, {"layers", 3}, {"width", 128}, {"classes", 10}}, 3);
}

int64_t numel(const models::Layer& layer) {
  int64_t n = 0;
  for (const auto& p : layer.module.ptr()->parameters()) n += p.numel();
  return n;
}

TEST(Profiler, ProfilesEveryLayerOfAnMlp) {
  const models::Model model = smallMlp();
  const int64_t batch = 16;
  const graph::LayerGraph g = profileModel(model, batch, {1, 3, "adam"});
  ASSERT_EQ(g.size(), static_cast<int>(model.layers.size()));
  EXPECT_EQ(g.batchSize(), batch);
  EXPECT_TRUE(g.isChain());
  for (int i = 0; i < g.size(); ++i) {
    const graph::Layer& l = g.layer(i);
    const models::Layer& m = model.layers[i];
    SCOPED_TRACE(l.name);
    EXPECT_EQ(l.name, m.name);
    EXPECT_EQ(l.kind, m.kind);
    EXPECT_GT(l.forward_seconds, 0);
    EXPECT_GT(l.backwardSeconds(), 0);
    // The model input needs no gradient: the first layer has no I part.
    if (i == 0) EXPECT_EQ(l.backward_input_seconds, 0);
    else EXPECT_GT(l.backward_input_seconds, 0);
    EXPECT_EQ(l.param_bytes, 4 * numel(m));
    EXPECT_EQ(l.optimizer_state_bytes, 2 * l.param_bytes);
    EXPECT_GT(l.optimizer_seconds, 0);  // every mlp layer has weights to step
    EXPECT_GT(l.split_weight_seconds, 0);  // and a W of its own to time after I
    EXPECT_GT(l.forward_no_grad_seconds, 0);  // and a forward pass without a graph, as recomputation's F
    const int64_t width = i + 1 == g.size() ? 10 : 128;
    EXPECT_EQ(l.output_bytes, 4 * batch * width);
    // Linear + ReLU keeps its output (ReLU's backward reads it); the head, a bare
    // Linear, keeps nothing it made, but its output is still held after the forward.
    EXPECT_GE(l.saved_activation_bytes, l.output_bytes);
    EXPECT_LE(l.saved_activation_bytes, 4 * l.output_bytes);
    if (i + 1 < g.size()) {
      // Between a split schedule's I and W, also the gradient of the Linear's output.
      EXPECT_EQ(l.split_activation_bytes, l.saved_activation_bytes + l.output_bytes);
    } else {
      // The head computes the loss, as the last stage does (NOTE(loss)): after its forward
      // pass the loss's log-probabilities are held (output-sized) where its output was,
      // and its I leaves the output's gradient for W, the loss's graph gone.
      EXPECT_LT(l.saved_activation_bytes, 2 * l.output_bytes);
      EXPECT_GE(l.split_activation_bytes, l.output_bytes);
    }
    // The peak holds at least the output and the parameters' gradients.
    EXPECT_GE(l.peak_memory_bytes, l.output_bytes + l.param_bytes);
  }
}

// Every layer's B, I and W was timed as an engine call of its own, which a stage makes
// once per action: the call is measured apart (NOTE(backward-call)), kept in the graph
// and its JSON, microseconds on a CPU.
TEST(Profiler, TimesTheEnginesCallApartFromTheLayers) {
  const graph::LayerGraph g = profileModel(smallMlp(), 16, {1, 3, "adam"});
  EXPECT_GT(g.backwardCallSeconds(), 0);
  EXPECT_LT(g.backwardCallSeconds(), 1e-3);
  EXPECT_EQ(graph::LayerGraph::fromJson(g.toJson(), "written").backwardCallSeconds(), g.backwardCallSeconds());
}

TEST(Profiler, SgdKeepsOneMomentumPerParameter) {
  const models::Model model = smallMlp();
  const graph::LayerGraph g = profileModel(model, 2, {0, 1, "sgd"});
  for (const graph::Layer& l : g.layers()) EXPECT_EQ(l.optimizer_state_bytes, l.param_bytes);
  EXPECT_EQ(optimizerStateBytes("adam", 10), 20);
  EXPECT_THROW(optimizerStateBytes("rmsprop", 10), Error);
}

TEST(Profiler, LeavesModesGradientsBuffersAndTheGeneratorAlone) {
  // ResNet with batch norm: running statistics would move in training mode.
  const models::Model model = models::buildModel("resnet50", {{"width", 4}, {"image_size", 32}}, 1);
  model.layers[0].module.ptr()->eval();  // a mix of modes
  std::vector<torch::Tensor> before;
  for (const auto& layer : model.layers)
    for (const auto& b : layer.module.ptr()->buffers()) before.push_back(b.clone());
  const auto params = model.parameters(0, static_cast<int>(model.layers.size()));
  std::vector<torch::Tensor> weights;
  for (const auto& p : params) weights.push_back(p.detach().clone());

  torch::manual_seed(42);
  const graph::LayerGraph g = profileModel(model, 2, {1, 1, "adam"});
  const torch::Tensor drawn = torch::rand({4});
  torch::manual_seed(42);
  EXPECT_TRUE(torch::equal(drawn, torch::rand({4}))) << "profiling drew from the global generator";
  profileModel(model, 2, {1, 1, "sgd"});  // its steps, at learning rate 0, leave the weights too

  EXPECT_EQ(g.size(), 18);
  EXPECT_FALSE(model.layers[0].module.ptr()->is_training());
  for (std::size_t i = 1; i < model.layers.size(); ++i) EXPECT_TRUE(model.layers[i].module.ptr()->is_training());
  std::size_t k = 0;
  for (const auto& layer : model.layers)
    for (const auto& b : layer.module.ptr()->buffers()) EXPECT_TRUE(torch::equal(b, before[k++]));
  for (std::size_t i = 0; i < params.size(); ++i) {
    EXPECT_FALSE(params[i].grad().defined());
    EXPECT_TRUE(torch::equal(params[i], weights[i]));
  }
}

TEST(Profiler, TokenInputsAndJsonRoundTrip) {
  const models::Model gpt =
      models::buildModel("gpt", {{"layers", 2}, {"width", 16}, {"heads", 2}, {"context", 8}, {"vocab", 32}}, 0);
  const graph::LayerGraph g = profileModel(gpt, 4, {1, 2, "adam"});
  ASSERT_EQ(g.size(), 4);
  EXPECT_EQ(g.layer(0).name, "embed");
  EXPECT_EQ(g.layer(0).backward_input_seconds, 0);  // token ids have no gradient
  EXPECT_GT(g.layer(0).backward_weight_seconds, 0);
  EXPECT_GT(g.layer(1).split_weight_seconds, 0);  // a block's W after I, as the executor runs it
  EXPECT_EQ(g.layer(3).output_bytes, 4 * 4 * 8 * 32);  // (N, T, V) logits
  // A transformer block keeps far more than its output for the backward pass.
  EXPECT_GT(g.layer(1).saved_activation_bytes, 3 * g.layer(1).output_bytes);

  const json_io::Json j = g.toJson();
  const graph::LayerGraph back = graph::LayerGraph::fromJson(j, "profile.json");
  EXPECT_EQ(back.toJson(), j);
  EXPECT_EQ(back.layer(1).peak_memory_bytes, g.layer(1).peak_memory_bytes);
  EXPECT_GT(back.layer(1).split_activation_bytes, 0);
  EXPECT_EQ(back.layer(1).split_activation_bytes, g.layer(1).split_activation_bytes);
}

TEST(Profiler, ProfilesEachLayerOfAGraphOnItsRealInputs) {
  // dlrm: two branch kinds from the model input, a merge of five, a layer without weights.
  const models::Model model =
      models::buildModel("dlrm", {{"dense", 5}, {"tables", 3}, {"rows", 20}, {"dim", 4}, {"hidden", 8}}, 0);
  const int64_t batch = 8;
  const graph::LayerGraph g = profileModel(model, batch, {1, 2, "adam"});
  ASSERT_EQ(g.size(), static_cast<int>(model.layers.size()));
  EXPECT_FALSE(g.isChain());
  std::vector<int> all(model.layers.size());
  for (int i = 0; i < g.size(); ++i) all[i] = i;
  const auto outputs = models::forwardLayers(model, all, {{models::kModelInput, models::constantInput(model.input, batch)}});
  for (int i = 0; i < g.size(); ++i) {
    const graph::Layer& l = g.layer(i);
    SCOPED_TRACE(l.name);
    EXPECT_EQ(l.name, model.layers[i].name);
    EXPECT_EQ(l.inputs, models::graphInputs(model, i));
    EXPECT_EQ(l.output_bytes, models::tensorBytes(outputs.at(l.name)));
    // Layers reading only the model input have no I part; the others do.
    if (l.inputs.empty()) EXPECT_EQ(l.backward_input_seconds, 0);
    else EXPECT_GT(l.backward_input_seconds, 0);
  }
  const graph::Layer& interaction = g.layer(g.indexOf("interaction"));
  EXPECT_EQ(interaction.inputs, (std::vector<std::string>{"bottom1", "table0", "table1", "table2"}));
  EXPECT_EQ(interaction.output_bytes, 4 * batch * (4 + 6));  // the dense vector and 4 x 3 / 2 dot products
  EXPECT_EQ(interaction.param_bytes, 0);
  EXPECT_EQ(interaction.backward_weight_seconds, 0);  // nothing to differentiate but the inputs
  EXPECT_EQ(interaction.optimizer_seconds, 0);
  EXPECT_GT(g.layer(g.indexOf("table0")).backward_weight_seconds, 0);
  // The merged input (N, 4 x dim) is made by the layer: counted in its peak.
  EXPECT_GE(interaction.peak_memory_bytes, 4 * batch * 4 * 4);
}

TEST(Profiler, RefusesBadArguments) {
  const models::Model model = smallMlp();
  EXPECT_THROW(profileModel(model, 0), Error);
  EXPECT_THROW(profileModel(model, 4, {2, 0, "adam"}), Error);
  EXPECT_THROW(profileModel(model, 4, {-1, 1, "adam"}), Error);
  EXPECT_THROW(profileModel(model, 4, {2, 1, "adagrad"}), Error);
  EXPECT_THROW(profileModel(model, 4, {2, 1, "adam", 2, 2}), Error);
  EXPECT_THROW(profileModel(model, 4, {2, 1, "adam", -1, 2}), Error);
  EXPECT_THROW(profileModel(model, 4, {2, 1, "adam", 0, 0}), Error);
  EXPECT_THROW(profileModel(model, 4, {2, 1, "adam", 0, 1, 0}), Error);
}

// fc1 and fc2 of the small mlp are the same module on the same shapes; fc0 loads the
// batch and the head computes the loss, so they are timed as themselves.
TEST(Profiler, ALayerIdenticalToAnEarlierOneTakesItsTimes) {
  const models::Model model = smallMlp();
  ASSERT_EQ(model.layers.size(), 4u);
  ProfileOptions once{1, 3, "adam"};
  const graph::LayerGraph g = profileModel(model, 8, once);
  EXPECT_EQ(g.layer(2).forward_seconds, g.layer(1).forward_seconds);
  EXPECT_EQ(g.layer(2).backward_weight_seconds, g.layer(1).backward_weight_seconds);
  EXPECT_EQ(g.layer(2).optimizer_seconds, g.layer(1).optimizer_seconds);
  EXPECT_NE(g.layer(0).forward_seconds, g.layer(1).forward_seconds);
  ProfileOptions every = once;
  every.time_identical_once = false;
  const graph::LayerGraph h = profileModel(model, 8, every);
  EXPECT_NE(h.layer(2).forward_seconds, h.layer(1).forward_seconds);  // timed apart: never equal to the nanosecond
}

// A profile's cost is priced on what each process times (job/run_profile.cpp): a share's
// part of the model's forward time and the parameters it steps, over the layers it times
// itself. One share of an mlp of identical hidden layers times three of its nine (the
// first, which reads the input, one hidden layer, and the classifier with the loss).
TEST(Profiler, ASharesWorkIsWhatItTimesOfTheModel) {
  const models::Model model =
      models::buildModel("mlp", {{"input", 512}, {"layers", 8}, {"width", 512}, {"classes", 10}}, 3);
  const std::vector<ShareWork> one = shareWork(model, 2, 1);
  ASSERT_EQ(one.size(), 1u);
  // The layers it times are told by their parameters; their part of the forward time is a
  // timing, which noise moves, so only its range is checked.
  EXPECT_EQ(one[0].stepped_parameters, numel(model.layers[0]) + numel(model.layers[1]) + numel(model.layers.back()));
  EXPECT_GT(one[0].forward_fraction, 0.0);
  EXPECT_LE(one[0].forward_fraction, 1.0);
  const std::vector<ShareWork> two = shareWork(model, 2, 2);
  ASSERT_EQ(two.size(), 2u);
  for (const ShareWork& w : two) {
    EXPECT_GT(w.forward_fraction, 0.0);
    EXPECT_LE(w.forward_fraction, 1.0);
    EXPECT_GT(w.stepped_parameters, 0);
  }
  EXPECT_THROW(shareWork(model, 0, 2), Error);
  EXPECT_THROW(shareWork(model, 2, 0), Error);
  EXPECT_GT(optimizerSecondsPerParameter("adam"), 0.0);
  EXPECT_THROW(optimizerSecondsPerParameter("adagrad"), Error);
}

// Every step is timed with the gradients it steps (LibTorch 2 clears them to none after
// each): Adam over a layer's weights reads and writes them all, far more than nothing.
TEST(Profiler, EveryTimedStepStepsTheLayersWeights) {
  const models::Model wide = models::buildModel("mlp", {{"input", 512}, {"layers", 2}, {"width", 512}, {"classes", 10}}, 3);
  const graph::LayerGraph g = profileModel(wide, 4, {1, 5, "adam"});
  // A step of 1 MiB of weights, two moments and a gradient: at 20 GB/s still 0.25 ms.
  EXPECT_GT(g.layer(1).optimizer_seconds, 50e-6) << "the step found no gradients to apply";
}

TEST(Profiler, StopsTimingOnceThePassesAgree) {
  const models::Model model = smallMlp();
  int timed = 0;
  ProfileOptions o{1, 50, "sgd"};
  o.min_repeats = 2;
  o.spread = 1e9;  // any two passes agree
  o.progress = [&](const ProfileProgress& p) { timed = p.timed; };
  profileModel(model, 4, o);
  EXPECT_EQ(timed, 2);
  o.spread = 0;  // no two passes agree: every repeat is timed
  profileModel(model, 4, o);
  EXPECT_EQ(timed, 50);
  o.min_repeats = 51;
  EXPECT_THROW(profileModel(model, 4, o), Error);
}

// Counts what the profile asks of its companions, and keeps it running two passes more.
class CountingRendezvous : public ProfileRendezvous {
 public:
  void readyToTime() override { calls += "ready "; }
  void doneTiming() override { calls += "done "; }
  bool othersTiming() override {
    calls += "others ";
    return ++asked <= 2;
  }
  std::string calls;
  int asked = 0;
};

TEST(Profiler, SharesTimeTogetherWithSeveralMicrobatchesInFlight) {
  const models::Model model = smallMlp();
  CountingRendezvous rendezvous;
  ProfileOptions o{1, 3, "sgd", 0, 2, 2, &rendezvous};
  const graph::LayerGraph g = profileModel(model, 8, o);
  EXPECT_EQ(rendezvous.calls, "ready done others others others ");
  EXPECT_GT(g.layer(0).forward_seconds, 0);
  EXPECT_GT(g.layer(1).backwardSeconds(), 0);
  EXPECT_EQ(g.layer(2).forward_seconds, 0);  // the other share's
}

TEST(Profiler, LoadingABatchIsPricedOnTheFirstLayerOnlyByItsShare) {
  const models::Model model = smallMlp();
  int loads = 0;
  ProfileOptions o{1, 3, "sgd"};
  o.load_batch = [&] {
    ++loads;
    // Far above a small layer's forward, even on a loaded machine (a test beside it
    // once took 31 ms of one).
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  };
  const graph::LayerGraph whole = profileModel(model, 8, o);
  EXPECT_EQ(loads, 1 + 3);  // one untimed, then `repeats` timed
  EXPECT_GE(whole.layer(0).forward_seconds, 0.100);
  for (int l = 1; l < whole.size(); ++l) EXPECT_LT(whole.layer(l).forward_seconds, 0.100) << l;
  // The share without the model's input reader does not load at all.
  o.share = 1;
  o.shares = 2;
  loads = 0;
  const graph::LayerGraph second = profileModel(model, 8, o);
  EXPECT_EQ(loads, 0);
  EXPECT_EQ(second.layer(0).forward_seconds, 0);
}

TEST(Profiler, TheLossIsPricedOnTheLayerWhoseOutputIsTheModels) {
  // A head of width 1 over 100,000 classes: its cross-entropy costs several times the
  // layer itself, so a profile that left the loss out would time the head far below it.
  const models::Model model =
      models::buildModel("mlp", {{"input", 4}, {"layers", 1}, {"width", 1}, {"classes", 100000}}, 0);
  const int64_t batch = 64;
  const torch::Tensor logits = torch::randn({batch, 100000}, torch::requires_grad());
  const torch::Tensor labels = torch::randint(100000, {batch}, torch::kLong);
  // The loss alone, settled as the profile's passes are: in pipetrain's heap policy (its
  // main's; otherwise each run faults in its 25 MB of probabilities and gradients
  // afresh, which this machine's neighbours make slower still), medians of 5 after 3
  // untimed.
  util::retainFreedMemory();
  std::vector<double> forward, backward;
  auto timeLossAlone = [&] {
    for (int i = 0; i < 8; ++i) {
      const auto start = std::chrono::steady_clock::now();
      const torch::Tensor loss = models::lossOf(model, logits, labels);
      const auto middle = std::chrono::steady_clock::now();
      loss.backward();
      const auto end = std::chrono::steady_clock::now();
      logits.mutable_grad() = torch::Tensor();  // a fresh gradient each time, as the profile's
      if (i < 3) continue;
      forward.push_back(std::chrono::duration<double>(middle - start).count());
      backward.push_back(std::chrono::duration<double>(end - middle).count());
    }
  };
  // Before and after the profile: this machine's speed drifts between measurements, and
  // under ctest -j2 the loss alone ran 2x the profile's median in its median run (36 ms
  // against 17 ms) and, in another cold CI, 2.2x in its fastest (14.9 ms against 6.9).
  timeLossAlone();
  const graph::LayerGraph g = profileModel(model, batch, {1, 3, "sgd"});
  timeLossAlone();
  std::sort(forward.begin(), forward.end());
  std::sort(backward.begin(), backward.end());
  const graph::Layer& head = g.layer(g.size() - 1);
  // Half of the fastest, not the median, of the runs on either side.
  EXPECT_GE(head.forward_seconds, 0.5 * forward.front());
  EXPECT_GE(head.backwardSeconds(), 0.5 * backward.front());
  // The hidden layer before it computes no loss.
  EXPECT_LT(g.layer(0).forward_seconds, 0.5 * forward.front());
}

TEST(Profiler, SharesTimeTheirOwnLayersAndMergeIntoOneProfile) {
  const models::Model model = smallMlp();  // 4 layers: three of 128 x 128 (+128), one of 10 x 128 (+10)
  std::vector<graph::LayerGraph> shares;
  for (int k = 0; k < 2; ++k) shares.push_back(profileModel(model, 8, {1, 3, "sgd", k, 2}));
  // Balanced by parameter bytes: layers 0-1 and 2-3.
  for (int k = 0; k < 2; ++k)
    for (int l = 0; l < 4; ++l) {
      SCOPED_TRACE("share " + std::to_string(k) + ", layer " + std::to_string(l));
      const graph::Layer& layer = shares[k].layer(l);
      EXPECT_EQ(layer.forward_seconds > 0, l / 2 == k);
      EXPECT_EQ(layer.optimizer_seconds > 0, l / 2 == k);
      EXPECT_EQ(layer.param_bytes, 4 * numel(model.layers[l]));  // sizes and memory of every layer
      EXPECT_GE(layer.peak_memory_bytes, layer.output_bytes);
    }
  // Each share probed its core, and the merge takes its times to the slower core's speed
  // (runtime/core_probe.h).
  const double slower = std::max(shares[0].profiledAs().probe_seconds, shares[1].profiledAs().probe_seconds);
  EXPECT_GT(shares[0].profiledAs().probe_seconds, 0);
  EXPECT_GT(shares[1].profiledAs().probe_seconds, 0);
  const graph::LayerGraph merged = plan::mergeProfileShares(shares);
  for (int l = 0; l < 4; ++l) {
    const double speed = slower / shares[l / 2].profiledAs().probe_seconds;
    EXPECT_DOUBLE_EQ(merged.layer(l).forward_seconds, shares[l / 2].layer(l).forward_seconds * speed);
    EXPECT_DOUBLE_EQ(merged.layer(l).splitWeightSeconds(), shares[l / 2].layer(l).splitWeightSeconds() * speed);
    EXPECT_GT(merged.layer(l).backwardSeconds(), 0);
  }
  EXPECT_EQ(merged.profiledAs().probe_seconds, slower);
  // More processes than layers repeat the shares: every process still profiles.
  const graph::LayerGraph fifth = profileModel(model, 8, {1, 1, "sgd", 5, 6});
  EXPECT_GT(fifth.layer(1).forward_seconds, 0);
  EXPECT_EQ(fifth.layer(0).forward_seconds, 0);
}

// ----- network ----------------------------------------------------------------------------

// A step's speed-up on this process's threads over one: timed over rounds, and the
// threads (LibTorch's pool and BLAS's) left as they were.
TEST(Profiler, MeasuresHowAStepDividesOverThreadsAndLeavesThemAsTheyWere) {
  const models::Model model = smallMlp();
  const int pool_before = at::get_num_threads();
  at::set_num_threads(2);  // threads it must give back, one thread not being them
  const int pool = at::get_num_threads(), blas = blasThreads();
  const ThreadSpeedup s = threadSpeedup(model, 8, runtime::Precision::kFp32);
  EXPECT_GT(s.speedup, 0);
  EXPECT_GE(s.rounds, 3);
  EXPECT_LE(s.rounds, 15);
  EXPECT_EQ(at::get_num_threads(), pool);
  EXPECT_EQ(blasThreads(), blas);
  at::set_num_threads(pool_before);
}

// A rank on `host`, the `local_rank`th there, on a machine of `memory` bytes.
RankHost rankOn(const std::string& host, int local_rank, int64_t memory) {
  RankHost h;
  h.host = host;
  h.local_rank = local_rank;
  h.physical_memory_bytes = memory;
  return h;
}

// profileNetwork on ranks that are threads of this process, rank r telling `hosts[r]`;
// every rank's profile.
std::vector<NetworkProfile> profileOnThreads(const std::vector<RankHost>& hosts, const NetworkOptions& o) {
  const int world = static_cast<int>(hosts.size());
  auto group = runtime::makeInProcessGroup(world, std::chrono::seconds(20));
  std::vector<NetworkProfile> profiles(world);
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        profiles[r] = profileNetwork(*group[r], hosts[r], o);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return profiles;
}

TEST(ProfileNetwork, RankZeroMeasuresEveryOtherRank) {
  NetworkOptions o;
  o.sizes = {1024, 64 * 1024};
  o.repeats = 3;
  o.warmup_seconds = 0;
  std::vector<RankHost> hosts;
  for (int r = 0; r < 3; ++r) {
    hosts.push_back(rankOn("node", r, int64_t{3} << 30));
    hosts.back().threads = r + 1;  // what each rank computes on, as its cluster device says
  }
  const std::vector<NetworkProfile> profiles = profileOnThreads(hosts, o);

  const NetworkProfile& p = profiles[0];
  ASSERT_EQ(p.ranks.size(), 3u);
  EXPECT_EQ(p.ranks[2].local_rank, 2);
  ASSERT_EQ(p.pairs.size(), 2u);
  for (const auto& m : p.pairs) {
    EXPECT_GT(m.latency_seconds, 0);
    ASSERT_EQ(m.bandwidth.size(), 2u);
    for (double bw : m.bandwidth) EXPECT_GT(bw, 0);
    // The ranks are threads of this process here, so the CPU times mix; they are there.
    EXPECT_GE(m.overhead_seconds, 0);
    ASSERT_EQ(m.message_cpu_seconds.size(), 2u);
    for (double cpu : m.message_cpu_seconds) EXPECT_GE(cpu, 0);
  }
  EXPECT_TRUE(profiles[1].pairs.empty());
  EXPECT_GT(p.allreduce_seconds, 0);
  EXPECT_GT(p.allreduce_cpu_seconds, 0);

  const cluster::ClusterSpec c = clusterFromNetwork(p);
  ASSERT_EQ(c.size(), 3);
  EXPECT_EQ(c.device(1).name, "node-1");
  EXPECT_EQ(c.device(0).memory_bytes, int64_t{1} << 30);  // 3 GiB shared by three ranks
  EXPECT_EQ(c.device(2).threads, 3);
  ASSERT_EQ(c.levels().size(), 1u);
  EXPECT_EQ(c.levels()[0].group_size, 3);
  // Readable back as a cluster file.
  EXPECT_EQ(cluster::ClusterSpec::fromJson(c.toJson(), "cluster.json").toJson(), c.toJson());

  auto single = runtime::makeInProcessGroup(1, std::chrono::seconds(1));
  EXPECT_THROW(profileNetwork(*single[0], rankOn("node", 0, 1), o), Error);
}

// Ranks on three hosts: rank 0 measures against the others, then the first ranks of
// the other two hosts against each other, and rank 0 gets what they measured.
TEST(ProfileNetwork, PairsOfOtherHostsAreMeasuredToo) {
  NetworkOptions o;
  o.sizes = {1024};
  o.repeats = 2;
  o.warmup_seconds = 0;
  const std::vector<RankHost> hosts{rankOn("a", 0, int64_t{1} << 30), rankOn("b", 0, int64_t{1} << 30),
                                    rankOn("b", 1, int64_t{1} << 30), rankOn("c", 0, int64_t{1} << 30)};
  const NetworkProfile p = profileOnThreads(hosts, o)[0];
  ASSERT_EQ(p.pairs.size(), 4u);  // 0-1, 0-2, 0-3, then b's first rank against c's
  EXPECT_EQ(p.pairs[2].from, 0);
  EXPECT_EQ(p.pairs[3].from, 1);
  EXPECT_EQ(p.pairs[3].peer, 3);
  EXPECT_GT(p.pairs[3].bandwidth.at(0), 0);
  EXPECT_GT(p.pairs[3].latency_seconds, 0);
  EXPECT_EQ(clusterFromNetwork(p).size(), 4);
}

NetworkProfile twoHosts(std::vector<std::string> hosts) {
  NetworkProfile p;
  p.sizes = {1 << 20};
  std::map<std::string, int> local;
  for (const auto& h : hosts) p.ranks.push_back(rankOn(h, local[h]++, int64_t{8} << 30));
  for (int r = 1; r < static_cast<int>(hosts.size()); ++r) {
    const bool same = hosts[r] == hosts[0];
    // Host CPU: 5 us per message on the same host, 30 us across; a MiB copied in 0.1 ms
    // on the same host (10 GiB/s), in no measurable time across.
    p.pairs.push_back({r, same ? 10e-6 : 100e-6, {same ? 20e9 : 1e9}, same ? 5e-6 : 30e-6, {same ? 1e-4 : 0.0}});
  }
  return p;
}

// Ranks that profiled on GPUs: each a "gpu" device with its GPU's memory and its host
// link, and every level through host memory (the profile's messages went over Gloo).
TEST(ProfileNetwork, GpuRanksBecomeGpusBehindTheirHostLinks) {
  NetworkProfile p = twoHosts({"a", "a"});
  for (int r = 0; r < 2; ++r) {
    p.ranks[r].gpu_memory_bytes = int64_t{80} << 30;
    p.ranks[r].host_link_bandwidth = r == 0 ? 25e9 : 20e9;
  }
  const cluster::ClusterSpec c = clusterFromNetwork(p);
  EXPECT_EQ(c.device(0).kind, "gpu");
  EXPECT_EQ(c.device(1).memory_bytes, int64_t{80} << 30);
  EXPECT_DOUBLE_EQ(c.device(1).host_link_bandwidth, 20e9);
  EXPECT_TRUE(c.route(0, 1).through_host);
  EXPECT_DOUBLE_EQ(cluster::messageEndSeconds(c.device(0), c.route(0, 1), 50e9),
                   2.0 + c.route(0, 1).host.seconds(50e9));
  EXPECT_FALSE(clusterFromNetwork(twoHosts({"a", "a"})).route(0, 1).through_host);  // CPU ranks
}

// Network namespaces of one machine (bench/hosts): one host name, an identity and an
// address each. The identity tells the hosts apart, the address names their devices.
TEST(ProfileNetwork, HostsThatShareANameAreToldApartByAddress) {
  NetworkProfile p = twoHosts({"a", "b"});
  p.ranks[0].host = p.ranks[1].host = "machine";
  p.ranks[0].address = "10.99.0.1";
  p.ranks[1].address = "10.99.0.2";
  p.ranks[1].local_rank = 0;
  p.ranks[0].host_id = 11;
  p.ranks[1].host_id = 12;
  const cluster::ClusterSpec c = clusterFromNetwork(p);
  ASSERT_EQ(c.size(), 2);
  EXPECT_EQ(c.device(0).name, "10.99.0.1-0");
  EXPECT_EQ(c.device(1).name, "10.99.0.2-0");
  ASSERT_EQ(c.levels().size(), 1u);
  EXPECT_EQ(c.levels()[0].name, "network");
  EXPECT_DOUBLE_EQ(c.levels()[0].bandwidth, 1e9);  // the cross-host figures
}

TEST(ProfileNetwork, HostsBecomeLevels) {
  // Two hosts of two ranks, ranks interleaved: devices grouped by host, two tiers.
  cluster::ClusterSpec c = clusterFromNetwork(twoHosts({"a", "b", "a", "b"}));
  ASSERT_EQ(c.size(), 4);
  EXPECT_EQ(c.device(1).name, "a-1");
  EXPECT_EQ(c.device(2).name, "b-0");
  EXPECT_EQ(c.device(0).memory_bytes, int64_t{4} << 30);
  ASSERT_EQ(c.levels().size(), 2u);
  EXPECT_EQ(c.levels()[0].group_size, 2);
  EXPECT_DOUBLE_EQ(c.levels()[0].bandwidth, 20e9);
  EXPECT_DOUBLE_EQ(c.levels()[1].latency, 100e-6);
  EXPECT_DOUBLE_EQ(c.route(0, 1).bandwidth, 20e9);
  EXPECT_DOUBLE_EQ(c.route(0, 3).bandwidth, 1e9);
  EXPECT_DOUBLE_EQ(c.route(0, 1).host.overhead, 5e-6);
  EXPECT_DOUBLE_EQ(c.route(0, 1).host.copy_bandwidth, (1 << 20) / 1e-4);
  EXPECT_DOUBLE_EQ(c.route(0, 3).host.overhead, 30e-6);
  EXPECT_TRUE(std::isinf(c.route(0, 3).host.copy_bandwidth));

  // Uneven hosts: one level with the slower, cross-host figures.
  c = clusterFromNetwork(twoHosts({"a", "a", "b"}));
  ASSERT_EQ(c.levels().size(), 1u);
  EXPECT_DOUBLE_EQ(c.levels()[0].bandwidth, 1e9);

  // An all-reduce of the MiB over the 3 ranks in 1 ms + the ring's 4 latencies of 100 us:
  // each rank sent 4/3 MiB in the 1 ms, the top level's all-reduce rate.
  NetworkProfile reduced = twoHosts({"a", "a", "b"});
  reduced.allreduce_seconds = 1e-3 + 4 * 100e-6;
  reduced.allreduce_cpu_seconds = 2e-3;  // ... and 2 ms of rank 0's CPU
  const cluster::Level& top = clusterFromNetwork(reduced).levels().back();
  EXPECT_DOUBLE_EQ(top.allreduce_bandwidth, 4.0 / 3 * (1 << 20) / 1e-3);
  EXPECT_DOUBLE_EQ(top.allreduce_host_bandwidth, 4.0 / 3 * (1 << 20) / 2e-3);
  EXPECT_EQ(clusterFromNetwork(twoHosts({"a", "a", "b"})).levels().back().allreduce_bandwidth, 0);  // not measured

  // Host b's link 10x slower than the others: the network level takes the median pair
  // (a slow one), and a and c get a link of their own at their rate. The all-reduce ran
  // at the slow route's rate (its ring crossed it): every route moves its share.
  NetworkProfile three = twoHosts({"a", "b", "c"});
  three.pairs[0].bandwidth = {0.1e9};
  three.pairs.push_back({2, 100e-6, {0.1e9}, 30e-6, {0.0}});
  three.pairs.back().from = 1;
  three.allreduce_seconds = 4 * 100e-6 + 4.0 / 3 * (1 << 20) / 0.05e9;  // half the slow route's rate
  c = clusterFromNetwork(three);
  EXPECT_DOUBLE_EQ(c.levels().back().bandwidth, 0.1e9);
  ASSERT_EQ(c.links().size(), 1u);
  EXPECT_EQ(c.links()[0].a + " " + c.links()[0].b, "a-0 c-0");
  EXPECT_DOUBLE_EQ(c.route(0, 2).bandwidth, 1e9);
  EXPECT_DOUBLE_EQ(c.route(1, 2).bandwidth, 0.1e9);
  EXPECT_NEAR(c.levels().back().allreduce_bandwidth, 0.05e9, 1);
  EXPECT_NEAR(c.route(0, 2).allreduce_bandwidth, 0.5e9, 10);
  // Pairs alike within kLinkSpread: one level, no links.
  three.pairs[0].bandwidth = three.pairs[2].bandwidth = {0.8e9};
  EXPECT_TRUE(clusterFromNetwork(three).links().empty());

  NetworkProfile twice = twoHosts({"a", "a"});
  twice.ranks[1].local_rank = 0;
  EXPECT_THROW(clusterFromNetwork(twice), Error);
}

}  // namespace
}  // namespace pipetrain::profiler
