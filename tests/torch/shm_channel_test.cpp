// Sums in shared memory between the ranks of one host (makeShmChannel): exact, the same
// bits on every rank, groups apart from each other, and a peer that is missing, stopped
// or exited named within the timeout, never a hang.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <thread>

#include "pipetrain/torch/transport.h"
#include "pipetrain/util/error.h"
#include "training_harness.h"

namespace pipetrain::runtime {
namespace {

std::string uniqueToken() {
  static std::atomic<int> count{0};
  return "shm-test-" + std::to_string(::getpid()) + "-" + std::to_string(count++);
}

// `ranks` threads, each with its channel over an in-process group; `body` runs on each.
void onRanks(int ranks, std::chrono::milliseconds timeout,
             const std::function<void(int rank, DataChannel& channel)>& body) {
  auto group = makeInProcessGroup(ranks, timeout);
  const std::string token = uniqueToken();
  std::vector<std::unique_ptr<DataChannel>> channels;
  for (int r = 0; r < ranks; ++r) channels.push_back(makeShmChannel(*group[r], token, timeout));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) threads.emplace_back([&, r] { body(r, *channels[r]); });
  for (auto& t : threads) t.join();
}

TEST(ShmChannel, SumsEveryChunkToTheSameBitsOnEveryRank) {
  const int ranks = 3;
  // Below a chunk, one chunk of floats exactly (512 KiB), one element over, and several.
  const std::vector<int64_t> sizes = {1, 7, 131072, 131073, 900001};
  for (const auto dtype : {torch::kFloat, torch::kDouble}) {
    std::vector<std::vector<torch::Tensor>> inputs(ranks), outputs(ranks);
    for (int r = 0; r < ranks; ++r)
      for (int64_t n : sizes) {
        torch::manual_seed(r * 100 + n % 97);
        inputs[r].push_back(torch::randn({n}, dtype));
        outputs[r].push_back(inputs[r].back().clone());
      }
    onRanks(ranks, std::chrono::seconds(20), [&](int r, DataChannel& channel) {
      EXPECT_TRUE(channel.sumsInSharedMemory());  // what the simulator prices the run's sums at
      std::vector<std::unique_ptr<PendingOp>> ops;
      for (auto& t : outputs[r]) ops.push_back(channel.startAllReduceSum(t, {0, 1, 2}));
      for (auto& op : ops) op->wait();
    });
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const torch::Tensor want = inputs[0][i].to(torch::kDouble) + inputs[1][i].to(torch::kDouble) + inputs[2][i].to(torch::kDouble);
      EXPECT_LT((outputs[0][i].to(torch::kDouble) - want).abs().max().item<double>(), 1e-5) << sizes[i];
      for (int r = 1; r < ranks; ++r) EXPECT_TRUE(torch::equal(outputs[r][i], outputs[0][i])) << "rank " << r << ", " << sizes[i];
    }
  }
}

TEST(ShmChannel, GroupsSumApartWhateverOrderTheyStartIn) {
  // Rank 1 is in both groups and starts {1, 2} first; rank 0 waits on {0, 1} meanwhile.
  std::vector<torch::Tensor> a(3), b(3);
  onRanks(3, std::chrono::seconds(20), [&](int r, DataChannel& channel) {
    a[r] = torch::full({300000}, static_cast<float>(r + 1));
    b[r] = torch::full({5}, static_cast<float>(10 * (r + 1)));
    std::unique_ptr<PendingOp> first, second;
    if (r == 1) first = channel.startAllReduceSum(b[r], {1, 2});
    if (r <= 1) second = channel.startAllReduceSum(a[r], {0, 1});
    if (r == 2) first = channel.startAllReduceSum(b[r], {1, 2});
    if (first) first->wait();
    if (second) second->wait();
  });
  EXPECT_EQ(a[0][299999].item<float>(), 3.0f);
  EXPECT_EQ(a[1][0].item<float>(), 3.0f);
  EXPECT_EQ(b[1][4].item<float>(), 50.0f);
  EXPECT_EQ(b[2][0].item<float>(), 50.0f);
  EXPECT_EQ(a[2][0].item<float>(), 3.0f);  // rank 2 had no part in {0, 1}
}

TEST(ShmChannel, DataParallelTrainingMatchesOneProcess) {
  // A replicated first stage and a replicated last one (whose loss is summed too), and
  // the gpt over data parallelism alone.
  TrainConfig c = smallConfig("mlp", {{"input", 16}, {"layers", 4}, {"width", 32}});
  usePlan(c, "1f1b", {2, 1});
  expectMatchesReference(c, Wire::kShm);
  usePlan(c, "zb-h1", {1, 2});
  expectMatchesReference(c, Wire::kShm);
  TrainConfig gpt = smallConfig("gpt", {{"layers", 2}, {"width", 32}, {"heads", 2}, {"context", 8}});
  usePlan(gpt, "gpipe", {2});
  expectMatchesReference(gpt, Wire::kShm);
}

TEST(ShmChannel, APeerThatNeverSumsIsNamedAtTheTimeout) {
  std::string error;
  const auto start = std::chrono::steady_clock::now();
  onRanks(2, std::chrono::seconds(1), [&](int r, DataChannel& channel) {
    channel.prepareGroup({0, 1});
    if (r == 1) return;
    error = errorOf([&] { channel.startAllReduceSum(torch::ones({10}), {0, 1})->wait(); });
  });
  EXPECT_NE(error.find("rank 0: all-reduce with rank(s) 1 in shared memory: rank 1 did not arrive within 1 s"),
            std::string::npos)
      << error;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(ShmChannel, APeerThatClosesItsChannelIsNamedAtOnce) {
  auto group = makeInProcessGroup(2, std::chrono::seconds(20));
  const std::string token = uniqueToken();
  auto zero = makeShmChannel(*group[0], token, std::chrono::seconds(20));
  auto one = makeShmChannel(*group[1], token, std::chrono::seconds(20));
  zero->prepareGroup({0, 1});
  one->prepareGroup({0, 1});
  const auto start = std::chrono::steady_clock::now();
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    one.reset();
  });
  const std::string error = errorOf([&] { zero->startAllReduceSum(torch::ones({10}), {0, 1})->wait(); });
  closer.join();
  EXPECT_NE(error.find("rank 1 stopped summing"), std::string::npos) << error;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(ShmChannel, APeerWhoseProcessExitedIsNamedAtOnce) {
  const std::string token = uniqueToken();
  auto group = makeInProcessGroup(2, std::chrono::seconds(20));
  auto zero = makeShmChannel(*group[0], token, std::chrono::seconds(20));
  zero->prepareGroup({0, 1});
  const pid_t child = fork();
  if (child == 0) {
    // Rank 1 maps the segment and dies without a word, as a killed process would.
    auto own = makeInProcessGroup(2, std::chrono::seconds(20));
    auto one = makeShmChannel(*own[1], token, std::chrono::seconds(20));
    one->prepareGroup({0, 1});
    _exit(0);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  const auto start = std::chrono::steady_clock::now();
  const std::string error = errorOf([&] { zero->startAllReduceSum(torch::ones({10}), {0, 1})->wait(); });
  EXPECT_NE(error.find("rank 1 (pid " + std::to_string(child) + ") exited"), std::string::npos) << error;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace pipetrain::runtime
