// The fault-injection seam (as LevelDB's Env is for files): a Transport that passes
// everything through to another until its `fail_after`-th operation, which throws as if
// the process had died there; or, given `hang_until`, first blocks until that flag is
// set, as a stopped process (SIGSTOP) is alive but silent. Production code never reads
// a fault setting; tests wrap a rank's transport in this instead.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "pipetrain/torch/transport.h"
#include "pipetrain/util/error.h"

namespace pipetrain::runtime {

class FaultyTransport : public Transport {
 public:
  FaultyTransport(Transport& inner, int64_t fail_after, const std::atomic<bool>* hang_until = nullptr)
      : inner_(inner), fail_after_(fail_after), hang_until_(hang_until) {}

  int rank() const override { return inner_.rank(); }
  int worldSize() const override { return inner_.worldSize(); }
  std::string name() const override { return inner_.name(); }
  std::unique_ptr<PendingOp> send(const torch::Tensor& tensor, int to, uint32_t tag) override {
    tick("send");
    return inner_.send(tensor, to, tag);
  }
  std::unique_ptr<PendingOp> recv(torch::Tensor buffer, int from, uint32_t tag) override {
    tick("receive");
    return inner_.recv(std::move(buffer), from, tag);
  }
  void allReduceSum(std::vector<torch::Tensor>& tensors, const std::vector<int>& group) override {
    if (!tensors.empty()) blocking_sums_.push_back({done_, tensors[0].scalar_type(), tensors[0].sizes().vec()});
    tick("all-reduce");
    inner_.allReduceSum(tensors, group);
  }
  std::unique_ptr<PendingOp> startAllReduceSum(torch::Tensor flat, const std::vector<int>& group) override {
    tick("all-reduce");
    return inner_.startAllReduceSum(std::move(flat), group);
  }
  void prepareGroup(const std::vector<int>& group) override { inner_.prepareGroup(group); }
  void barrier() override {
    tick("barrier");
    inner_.barrier();
  }

  int64_t operations() const { return done_; }
  // The blocking all-reduces made: at which operation, of what (tests find a
  // checkpoint's own all-reduce by its shape).
  struct Sum {
    int64_t operation;
    torch::ScalarType dtype;
    std::vector<int64_t> shape;
  };
  const std::vector<Sum>& blockingSums() const { return blocking_sums_; }
  // When the injected fault struck (unset if it never did).
  std::chrono::steady_clock::time_point failedAt() const { return failed_at_; }

 private:
  void tick(const char* what) {
    if (fail_after_ >= 0 && done_ >= fail_after_) {
      if (failed_at_ == std::chrono::steady_clock::time_point{}) failed_at_ = std::chrono::steady_clock::now();
      while (hang_until_ && !hang_until_->load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      throw Error("injected fault: rank " + std::to_string(rank()) + " died before its " + what + " (operation " +
                  std::to_string(done_) + ")");
    }
    ++done_;
  }

  Transport& inner_;
  int64_t fail_after_;
  const std::atomic<bool>* hang_until_;
  int64_t done_ = 0;
  std::chrono::steady_clock::time_point failed_at_{};
  std::vector<Sum> blocking_sums_;
};

}  // namespace pipetrain::runtime
