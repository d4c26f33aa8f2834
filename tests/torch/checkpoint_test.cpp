// Checkpoints: a run that dies and resumes ends with the parameters of a run that did
// not; a checkpoint loads under another plan; broken and foreign checkpoints are refused
// with a message naming the file; only the newest K stay.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "faulty_transport.h"
#include "pipetrain/torch/checkpoint.h"
#include "training_harness.h"

namespace pipetrain::runtime {
namespace {

namespace fs = std::filesystem;

// A fresh folder per test, removed at its end.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("pipetrain-ckpt-" + std::to_string(::getpid()) + "-" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

// 2 epochs of 5 mini-batches; into `dir`, when given, a checkpoint every 2 (and at each
// epoch's end).
TrainConfig checkpointConfig(const std::string& schedule, std::vector<int> replicas, const std::string& dir = "") {
  TrainConfig c = smallConfig("mlp", {{"input", 8}, {"layers", 4}, {"width", 16}, {"classes", 4}});
  c.max_steps_per_epoch = 5;
  c.epochs = 2;
  c.checkpoint_dir = dir;
  c.checkpoint_every = dir.empty() ? 0 : 2;
  usePlan(c, schedule, std::move(replicas));
  return c;
}

// The model's parameters in layer order, from the ranks' results under `config`'s plan.
std::vector<torch::Tensor> modelParameters(const TrainConfig& config, const std::vector<RankResult>& results) {
  const models::Model model = openModel(config);
  const auto stages = stageLayers(config.plan, model);
  std::vector<torch::Tensor> out;
  for (int s = 0; s < static_cast<int>(stages.size()); ++s)
    for (const RankResult& r : results) {
      auto it = std::find(r.stages.begin(), r.stages.end(), s);
      if (it == r.stages.end()) continue;
      std::size_t offset = 0;  // the rank's earlier stages' parameters come first
      for (auto e = r.stages.begin(); e != it; ++e)
        offset += model.parameters(stages[*e].layers).size();
      const std::size_t count = model.parameters(stages[s].layers).size();
      out.insert(out.end(), r.parameters.begin() + offset, r.parameters.begin() + offset + count);
      break;
    }
  return out;
}

// A rank that fails at an operation: dies there, or hangs there (alive, silent) until
// every other rank has ended.
struct Fault {
  int rank = -1;  // -1: none
  int64_t at = -1;
  bool hang = false;
};

// Runs the job with `fault`. Returns whether every rank finished; `errors` gets each
// rank's error ("" if it finished), `detected` the seconds from the fault to the last
// healthy rank's end.
bool runWithFault(const TrainConfig& c, const Fault& fault, std::vector<RankResult>* results = nullptr,
                  std::vector<int64_t>* operations = nullptr, double* detected = nullptr,
                  std::vector<std::string>* errors = nullptr) {
  const int n = rankCount(c);
  auto group = makeInProcessGroup(n, std::chrono::milliseconds(1500));
  std::vector<RankResult> out(n);
  std::vector<std::string> failed(n);
  std::vector<int64_t> ops(n);
  std::vector<std::chrono::steady_clock::time_point> ended(n), struck(n);
  std::atomic<bool> others_done{false};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      const bool faulty = r == fault.rank;
      FaultyTransport transport(*group[r], faulty ? fault.at : -1, faulty && fault.hang ? &others_done : nullptr);
      try {
        out[r] = trainRank(c, transport);
      } catch (const std::exception& e) {
        failed[r] = e.what();
      }
      ops[r] = transport.operations();
      struck[r] = transport.failedAt();
      ended[r] = std::chrono::steady_clock::now();
    });
  // The healthy ranks first: a hung rank is let go once they have all ended.
  for (int r = 0; r < n; ++r)
    if (r != fault.rank) threads[r].join();
  others_done = true;
  if (fault.rank >= 0) threads[fault.rank].join();
  auto last = std::chrono::steady_clock::time_point{};
  for (int r = 0; r < n; ++r)
    if (r != fault.rank) last = std::max(last, ended[r]);
  if (results) *results = std::move(out);
  if (operations) *operations = ops;
  if (detected && fault.rank >= 0) *detected = std::chrono::duration<double>(last - struck[fault.rank]).count();
  if (errors) *errors = failed;
  return std::all_of(failed.begin(), failed.end(), [](const std::string& e) { return e.empty(); });
}

bool runWithoutFault(const TrainConfig& c, std::vector<RankResult>* results = nullptr,
                     std::vector<int64_t>* operations = nullptr) {
  return runWithFault(c, Fault{}, results, operations);
}

double worstError(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want) {
  return relativeError(got, want);
}

// Dies at fixed random points (forward, backward, all-reduce, a checkpoint's own
// all-reduce, the step, evaluation), resumes from what is left, and must end exactly
// where the run that never died ended.
void expectResumeMatches(TrainConfig whole, const std::string& name) {
  TempDir uninterrupted_dir(name + "-whole"), dir(name);
  const std::string& schedule = whole.plan.schedule.name;
  whole.checkpoint_dir = uninterrupted_dir.str();
  whole.checkpoint_every = 2;
  std::vector<RankResult> want;
  std::vector<int64_t> total;
  ASSERT_TRUE(runWithoutFault(whole, &want, &total));
  const auto want_params = modelParameters(whole, want);

  std::mt19937 rng(11);  // fixed points: the test replays exactly
  for (int trial = 0; trial < 3; ++trial) {
    fs::remove_all(dir.path);
    TrainConfig c = whole;
    c.checkpoint_dir = dir.str();
    Fault fault;
    fault.rank = trial % rankCount(c);
    fault.at = std::uniform_int_distribution<int64_t>(total[fault.rank] / 2, total[fault.rank] - 1)(rng);
    fault.hang = trial == 1;  // stopped rather than dead
    const int dead = fault.rank;
    const int64_t at = fault.at;
    SCOPED_TRACE(schedule + ": rank " + std::to_string(dead) + (fault.hang ? " hangs" : " dies") +
                 " at operation " + std::to_string(at) + " of " + std::to_string(total[dead]));
    double ended = 0;
    std::vector<std::string> errors;
    ASSERT_FALSE(runWithFault(c, fault, nullptr, nullptr, &ended, &errors));
    EXPECT_LT(ended, 4 * 1.5 + 2);  // no hang: a few timeouts at most
    bool named = false;  // a healthy rank that waited on the faulty one says which
    for (int r = 0; r < rankCount(c); ++r)
      if (r != dead) named = named || errors[r].find("rank " + std::to_string(dead)) != std::string::npos;
    EXPECT_TRUE(named) << errors[(dead + 1) % rankCount(c)];
    // The death comes after the first checkpoint (half-way in, at the least):
    // the resumed run starts from a checkpoint, not from scratch.
    TrainConfig resumed = c;
    resumed.resume = dir.str();
    const int64_t from = findCheckpoint(dir.str()).manifest.position.minibatches;
    EXPECT_GT(from, 0);
    std::vector<RankResult> got;
    ASSERT_TRUE(runWithoutFault(resumed, &got));
    const double error = worstError(modelParameters(resumed, got), want_params);
    EXPECT_LT(error, 1e-6);
    char figure[160];
    std::snprintf(figure, sizeof figure,
                  "rank %d %s at operation %lld of %lld; every rank ended %.2f s later; resumed at mini-batch %lld: %.2e",
                  dead, fault.hang ? "hangs" : "dies", static_cast<long long>(at), static_cast<long long>(total[dead]), ended,
                  static_cast<long long>(from), error);
    ::testing::Test::RecordProperty(schedule + "_trial_" + std::to_string(trial), figure);
  }
}

TEST(Checkpoint, ASynchronousRunThatDiesAndResumesEndsAsTheUninterruptedOne) {
  expectResumeMatches(checkpointConfig("1f1b", {2, 1}), "sync");
}

TEST(Checkpoint, AnAsynchronousRunResumesExactlyAtItsDrains) {
  expectResumeMatches(checkpointConfig("pipedream", {1, 1, 1}), "pipedream");
}

TEST(Checkpoint, PipeMareResumesWithItsVelocityAndStepCount) {
  TrainConfig p = checkpointConfig("pipemare", {1, 1});
  p.plan.schedule.pipemare_lr_warmup = true;  // T1 counts steps across the resume
  p.plan.schedule.pipemare_warmup_steps = 20;
  p.plan.schedule.pipemare_correction = true;  // T2's velocity is state
  expectResumeMatches(p, "pipemare");
}

// A rank dies inside a checkpoint's write: after the files, in the all-reduce that
// tells rank 0 they are all in place, so no manifest is written. That folder is not a
// checkpoint; the one before it is intact and resumes exactly.
TEST(Checkpoint, ADeathInsideACheckpointLeavesTheOneBeforeIntact) {
  TempDir whole_dir("inside-whole"), dir("inside");
  TrainConfig c = checkpointConfig("1f1b", {1, 1}, whole_dir.str());
  c.epochs = 1;
  // The checkpoint's own all-reduce: a [ranks, 2] int64 sum (sizes and checksums).
  auto group = makeInProcessGroup(2, std::chrono::seconds(20));
  std::vector<int64_t> checkpoint_ops;
  std::vector<RankResult> want(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      FaultyTransport counting(*group[r], -1);
      want[r] = trainRank(c, counting);
      if (r == 1)
        for (const auto& sum : counting.blockingSums())
          if (sum.dtype == torch::kLong && sum.shape == std::vector<int64_t>{2, 2}) checkpoint_ops.push_back(sum.operation);
    });
  for (auto& t : threads) t.join();
  ASSERT_EQ(checkpoint_ops.size(), 3u);  // after mini-batches 2 and 4, and at the epoch's end

  c.checkpoint_dir = dir.str();
  ASSERT_FALSE(runWithFault(c, Fault{1, checkpoint_ops[1], false}));  // inside the second checkpoint
  int complete = 0, incomplete = 0;
  for (const auto& e : fs::directory_iterator(dir.path))
    (fs::exists(e.path() / "manifest.json") ? complete : incomplete) += 1;
  EXPECT_EQ(complete, 1);
  EXPECT_EQ(incomplete, 1);  // rank 0's file, maybe rank 1's, and no manifest
  EXPECT_EQ(findCheckpoint(dir.str()).manifest.position.minibatches, 2);
  TrainConfig resumed = c;
  resumed.resume = dir.str();
  std::vector<RankResult> got;
  ASSERT_TRUE(runWithoutFault(resumed, &got));
  EXPECT_EQ(worstError(modelParameters(resumed, got), modelParameters(c, want)), 0.0);
  int remaining = 0;  // the next checkpoints removed the incomplete folder and all but the newest 2
  for (const auto& e : fs::directory_iterator(dir.path)) remaining += fs::exists(e.path() / "manifest.json") ? 1 : 100;
  EXPECT_EQ(remaining, 2);
}

TEST(Checkpoint, LoadsUnderAnotherPlan) {
  TempDir dir("reshard");
  // Epoch 1 under 2 stages (the first replicated), epoch 2 under 3 stages, 1 rank each,
  // then under one data-parallel stage: synchronous SGD is the same whatever the plan.
  TrainConfig first = checkpointConfig("1f1b", {2, 1}, dir.str());
  first.epochs = 1;
  ASSERT_TRUE(runWithoutFault(first));
  TrainConfig whole = checkpointConfig("1f1b", {2, 1});
  std::vector<RankResult> want;
  ASSERT_TRUE(runWithoutFault(whole, &want));
  for (const auto& [schedule, replicas] :
       std::vector<std::pair<std::string, std::vector<int>>>{{"gpipe", {1, 1, 1}}, {"1f1b", {2}}, {"zb-h1", {1, 1}}}) {
    TrainConfig second = checkpointConfig(schedule, replicas);
    second.resume = dir.str();
    std::vector<RankResult> got;
    ASSERT_TRUE(runWithoutFault(second, &got)) << schedule;
    const double error = worstError(modelParameters(second, got), modelParameters(whole, want));
    EXPECT_LT(error, 1e-5) << schedule;
    char figure[32];
    std::snprintf(figure, sizeof figure, "%.2e", error);
    ::testing::Test::RecordProperty("reshard_" + schedule + "_" + std::to_string(replicas.size()) + "_stages", figure);
  }
}

TEST(Checkpoint, KeepsTheNewestAndRefusesBrokenOnes) {
  TempDir dir("broken");
  TrainConfig c = checkpointConfig("1f1b", {1, 1}, dir.str());
  c.checkpoint_keep = 2;
  ASSERT_TRUE(runWithoutFault(c));
  std::vector<fs::path> kept;
  for (const auto& e : fs::directory_iterator(dir.path)) kept.push_back(e.path());
  std::sort(kept.begin(), kept.end());
  ASSERT_EQ(kept.size(), 2u);  // of 6 written (2 + epoch end, per epoch)
  const Checkpoint newest = findCheckpoint(dir.str());
  EXPECT_EQ(newest.manifest.position.epoch, 2);
  EXPECT_EQ(newest.manifest.position.minibatches, 10);

  // Truncated: refused by name; the folder of checkpoints falls back to the older one.
  const fs::path shard = fs::path(newest.dir) / "rank-1.pt";
  fs::resize_file(shard, fs::file_size(shard) / 2);
  try {
    findCheckpoint(newest.dir);
    ADD_FAILURE() << "a truncated checkpoint was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank-1.pt: truncated"), std::string::npos) << e.what();
  }
  EXPECT_EQ(findCheckpoint(dir.str()).manifest.position.minibatches, 9);

  // Corrupted in place (same size): the CRC catches it.
  const Checkpoint older = findCheckpoint(dir.str());
  {
    std::fstream f(fs::path(older.dir) / "rank-0.pt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(fs::path(older.dir) / "rank-0.pt") / 2));
    f.put('\x5a');
  }
  try {
    findCheckpoint(older.dir);
    ADD_FAILURE() << "a corrupted checkpoint was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank-0.pt: corrupted"), std::string::npos) << e.what();
  }
  try {
    findCheckpoint(dir.str());
    ADD_FAILURE() << "a folder of broken checkpoints gave one";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no intact checkpoint"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, RefusesAnotherModelOrAnotherDataOrder) {
  TempDir dir("foreign");
  TrainConfig c = checkpointConfig("1f1b", {1, 1}, dir.str());
  c.epochs = 1;
  ASSERT_TRUE(runWithoutFault(c));
  auto refusal = [&](TrainConfig other) {
    other.checkpoint_dir.clear();
    other.checkpoint_every = 0;
    other.resume = dir.str();
    try {
      runInProcess(other, rankCount(other));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  TrainConfig wider = c;
  wider.model_config["width"] = 32;
  usePlan(wider, "1f1b", {1, 1});
  EXPECT_NE(refusal(wider).find("is of another model: fc0/body.0.weight has shape"), std::string::npos) << refusal(wider);
  TrainConfig reseeded = c;
  reseeded.seed = 5;
  EXPECT_NE(refusal(reseeded).find("does not match this run: the seed"), std::string::npos) << refusal(reseeded);
  TrainConfig done = c;  // the checkpoint ends the only epoch
  EXPECT_NE(refusal(done).find("leaves nothing to train"), std::string::npos) << refusal(done);
}

}  // namespace
}  // namespace pipetrain::runtime
