// Replicated stages reduce their gradients as DDP does: in buckets the gradients live in,
// started during the backward pass that completes them.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "../../src/torch/runtime/gradient_buckets.h"

namespace pipetrain::runtime {
namespace {

// Counts the reductions started, and whether they started inside a backward pass.
class Watching : public Transport {
 public:
  Watching(Transport& inner, const std::atomic<bool>& in_backward) : inner_(inner), in_backward_(in_backward) {}
  int rank() const override { return inner_.rank(); }
  int worldSize() const override { return inner_.worldSize(); }
  std::string name() const override { return inner_.name(); }
  std::unique_ptr<PendingOp> send(const torch::Tensor& t, int to, uint32_t tag) override { return inner_.send(t, to, tag); }
  std::unique_ptr<PendingOp> recv(torch::Tensor b, int from, uint32_t tag) override { return inner_.recv(b, from, tag); }
  void allReduceSum(std::vector<torch::Tensor>& t, const std::vector<int>& g) override { inner_.allReduceSum(t, g); }
  std::unique_ptr<PendingOp> startAllReduceSum(torch::Tensor flat, const std::vector<int>& group) override {
    ++started;
    if (in_backward_) ++started_in_backward;
    return inner_.startAllReduceSum(flat, group);
  }
  void prepareGroup(const std::vector<int>& group) override { inner_.prepareGroup(group); }
  void barrier() override { inner_.barrier(); }
  int started = 0, started_in_backward = 0;

 private:
  Transport& inner_;
  const std::atomic<bool>& in_backward_;
};

struct Replica {
  torch::nn::Sequential net{torch::nn::Linear(8, 16), torch::nn::ReLU(), torch::nn::Linear(16, 16), torch::nn::ReLU(),
                            torch::nn::Linear(16, 4)};
  std::vector<torch::Tensor> params() { return net->parameters(); }
  void copyWeightsFrom(Replica& other) {
    torch::NoGradGuard no_grad;
    auto mine = params(), theirs = other.params();
    for (std::size_t i = 0; i < mine.size(); ++i) mine[i].copy_(theirs[i]);
  }
};

TEST(GradientBuckets, ReduceDuringTheCompletingBackwardPassToTheSum) {
  auto group = makeInProcessGroup(2, std::chrono::seconds(10));
  std::vector<Replica> replicas(2);
  replicas[1].copyWeightsFrom(replicas[0]);
  std::vector<std::vector<torch::Tensor>> expected(2);
  std::vector<int> started(2), in_backward(2), buckets(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      std::atomic<bool> backward_running{false};
      Watching transport(*group[r], backward_running);
      auto params = replicas[r].params();
      // 256-byte buckets: each weight matrix (with the bias after it) fills one.
      GradientBuckets b(params, {0, 1}, transport, 256);
      buckets[r] = b.numBuckets();
      torch::manual_seed(100 + r);
      const torch::Tensor first = torch::randn({4, 8}), second = torch::randn({4, 8});
      // Two micro-batches: the first only accumulates, the second completes the gradients.
      replicas[r].net->forward(first).sum().backward();
      EXPECT_EQ(transport.started, 0);
      b.arm();
      backward_running = true;
      replicas[r].net->forward(second).sum().backward();
      backward_running = false;
      b.finish();
      started[r] = transport.started;
      in_backward[r] = transport.started_in_backward;
      // What each replica computed alone, for the expected sum.
      Replica alone;
      alone.copyWeightsFrom(replicas[r]);
      alone.net->forward(first).sum().backward();
      alone.net->forward(second).sum().backward();
      for (const auto& p : alone.params()) expected[r].push_back(p.grad().clone());
    });
  for (auto& t : threads) t.join();
  EXPECT_GE(buckets[0], 3);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(started[r], buckets[r]);
    EXPECT_EQ(in_backward[r], buckets[r]) << "every bucket started before the backward pass ended";
    const auto params = replicas[r].params();
    for (std::size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(torch::allclose(params[i].grad(), expected[0][i] + expected[1][i], 1e-5, 1e-6)) << "param " << i;
  }
}

TEST(GradientBuckets, FinishWithoutAPassStillSums) {
  auto group = makeInProcessGroup(2, std::chrono::seconds(10));
  std::vector<torch::Tensor> grads(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      torch::Tensor w = torch::zeros({3}, torch::requires_grad());
      GradientBuckets b({w}, {0, 1}, *group[r], 1 << 20);
      w.mutable_grad().fill_(r + 1.0f);  // the gradient is a view of the bucket
      b.finish();
      grads[r] = w.grad().clone();
    });
  for (auto& t : threads) t.join();
  for (const auto& g : grads) EXPECT_TRUE(torch::equal(g, torch::full({3}, 3.0f)));
}

}  // namespace
}  // namespace pipetrain::runtime
