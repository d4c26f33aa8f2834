// Ranks as threads of one process: a shared mailbox keyed by (from, to, tag). Sends
// copy the tensor, so the sender may reuse it at once; receives copy out.
#include <condition_variable>
#include <map>
#include <mutex>
#include <tuple>

#include "pipetrain/torch/transport.h"
#include "pipetrain/util/error.h"

namespace pipetrain::runtime {
namespace {

struct Shared {
  Shared(int n, std::chrono::milliseconds t, bool ordered) : world_size(n), timeout(t), in_order(ordered) {}
  const int world_size;
  const std::chrono::milliseconds timeout;
  const bool in_order;
  // In order: per (from, to), the tags of the Program messages sent, in sending order.
  std::map<std::pair<int, int>, std::vector<uint32_t>> sent_tags;
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::tuple<int, int, uint32_t>, std::vector<torch::Tensor>> mailbox;  // FIFO per key
  // The k-th all-reduce of a group: contributions by rank, the sum, who has taken it.
  struct Reduction {
    std::map<int, std::vector<torch::Tensor>> parts;
    std::vector<torch::Tensor> sum;
    bool done = false;
    std::size_t collected = 0;
  };
  std::map<std::pair<std::vector<int>, int>, Reduction> reductions;
};

class Done : public PendingOp {
 public:
  void wait() override {}
};

using ReductionKey = std::pair<std::vector<int>, int>;  // the group, its k-th all-reduce

// Adds `rank`'s tensors to the group's reduction `key`; the last to arrive sums them.
void contribute(Shared& s, const ReductionKey& key, int rank, const std::vector<torch::Tensor>& tensors) {
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    auto& r = s.reductions[key];
    auto& mine = r.parts[rank];  // present even with no tensors (a barrier)
    for (const auto& t : tensors) mine.push_back(t.detach().clone());
    if (r.parts.size() < key.first.size()) return;
    // Sum in rank order so every rank gets bitwise the same result.
    r.sum = r.parts.begin()->second;
    for (auto it = std::next(r.parts.begin()); it != r.parts.end(); ++it)
      for (std::size_t i = 0; i < r.sum.size(); ++i) r.sum[i] = r.sum[i] + it->second[i];
    r.done = true;
  }
  s.changed.notify_all();
}

// Waits for the group's other ranks to contribute to `key` and copies the sum out.
void collect(Shared& s, const ReductionKey& key, int rank, std::vector<torch::Tensor>& tensors) {
  std::unique_lock<std::mutex> lock(s.mutex);
  auto& r = s.reductions[key];
  if (!s.changed.wait_for(lock, s.timeout, [&] { return r.done; })) {
    // The ranks that never arrived are the ones to look at.
    std::string missing;
    for (int g : key.first)
      if (!r.parts.count(g)) missing += (missing.empty() ? "rank " : ", rank ") + std::to_string(g);
    throw Error("rank " + std::to_string(rank) + ": all-reduce timed out after " + std::to_string(s.timeout.count()) +
                " ms waiting for " + missing);
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_(r.sum[i]);
  if (++r.collected == key.first.size()) s.reductions.erase(key);
}

// An all-reduce this rank has contributed to, as Gloo's: the sum arrives on wait().
class PendingReduction : public PendingOp {
 public:
  PendingReduction(std::shared_ptr<Shared> s, ReductionKey key, int rank, torch::Tensor flat)
      : s_(std::move(s)), key_(std::move(key)), rank_(rank), flat_{std::move(flat)} {}
  void wait() override { collect(*s_, key_, rank_, flat_); }

 private:
  std::shared_ptr<Shared> s_;
  ReductionKey key_;
  int rank_;
  std::vector<torch::Tensor> flat_;
};

class PendingRecv : public PendingOp {
 public:
  // `order`: the receive's place among the pair's Program messages, or -1 (by tag only).
  PendingRecv(std::shared_ptr<Shared> s, torch::Tensor buffer, int from, int to, uint32_t tag, int order)
      : s_(std::move(s)), buffer_(std::move(buffer)), key_(from, to, tag), order_(order) {}
  void wait() override {
    std::unique_lock<std::mutex> lock(s_->mutex);
    if (order_ >= 0) checkOrder(lock);
    const bool arrived = s_->changed.wait_for(lock, s_->timeout, [&] {
      auto it = s_->mailbox.find(key_);
      return it != s_->mailbox.end() && !it->second.empty();
    });
    if (!arrived)
      throw Error("rank " + std::to_string(std::get<1>(key_)) + ": no message from rank " +
                  std::to_string(std::get<0>(key_)) + " (tag " + std::to_string(std::get<2>(key_)) + ") within " +
                  std::to_string(s_->timeout.count()) + " ms");
    auto& queue = s_->mailbox[key_];
    torch::Tensor t = queue.front();
    queue.erase(queue.begin());
    if (!t.sizes().equals(buffer_.sizes()))
      throw Error("rank " + std::to_string(std::get<1>(key_)) + ": message from rank " +
                  std::to_string(std::get<0>(key_)) + " has the wrong shape");
    buffer_.copy_(t);
  }

 private:
  // The sender's message of the same place in the pair's order must be this one.
  void checkOrder(std::unique_lock<std::mutex>& lock) {
    const auto [from, to, tag] = key_;
    const auto& sent = s_->sent_tags[{from, to}];
    if (!s_->changed.wait_for(lock, s_->timeout, [&] { return static_cast<int>(sent.size()) > order_; }))
      return;  // the wait below names the missing message
    if (sent[order_] != tag)
      throw Error("rank " + std::to_string(to) + ": its receive number " + std::to_string(order_ + 1) + " from rank " +
                  std::to_string(from) + " expects tag " + std::to_string(tag) + ", but that rank's send number " +
                  std::to_string(order_ + 1) + " to it has tag " + std::to_string(sent[order_]) +
                  ": the two post their messages in different orders, which a channel that matches by order "
                  "(NCCL) cannot carry");
  }

  std::shared_ptr<Shared> s_;
  torch::Tensor buffer_;
  std::tuple<int, int, uint32_t> key_;
  int order_;
};

class InProcessTransport : public Transport {
 public:
  InProcessTransport(std::shared_ptr<Shared> s, int rank) : s_(std::move(s)), rank_(rank) {}
  int rank() const override { return rank_; }
  int worldSize() const override { return s_->world_size; }
  std::string name() const override { return "in-process"; }

  std::unique_ptr<PendingOp> send(const torch::Tensor& tensor, int to, uint32_t tag) override {
    torch::Tensor copy = tensor.detach().clone();
    {
      std::lock_guard<std::mutex> lock(s_->mutex);
      s_->mailbox[{rank_, to, tag}].push_back(copy);
      if (s_->in_order && tag < kRuntimeTags) s_->sent_tags[{rank_, to}].push_back(tag);
    }
    s_->changed.notify_all();
    return std::make_unique<Done>();
  }

  std::unique_ptr<PendingOp> recv(torch::Tensor buffer, int from, uint32_t tag) override {
    const int order = s_->in_order && tag < kRuntimeTags ? receives_posted_[from]++ : -1;
    return std::make_unique<PendingRecv>(s_, std::move(buffer), from, rank_, tag, order);
  }

  void allReduceSum(std::vector<torch::Tensor>& tensors, const std::vector<int>& group) override {
    const ReductionKey key{group, reductions_done_[group]++};
    contribute(*s_, key, rank_, tensors);
    collect(*s_, key, rank_, tensors);
  }

  std::unique_ptr<PendingOp> startAllReduceSum(torch::Tensor flat, const std::vector<int>& group) override {
    ReductionKey key{group, reductions_done_[group]++};
    contribute(*s_, key, rank_, {flat});
    return std::make_unique<PendingReduction>(s_, std::move(key), rank_, std::move(flat));
  }

  void barrier() override {
    std::vector<torch::Tensor> none;
    allReduceSum(none, allRanks());
  }

 private:
  std::shared_ptr<Shared> s_;
  int rank_;
  std::map<std::vector<int>, int> reductions_done_;  // per group, for matching
  std::map<int, int> receives_posted_;               // per sender, in order: Program messages
};

}  // namespace

std::vector<std::unique_ptr<Transport>> makeInProcessGroup(int world_size, std::chrono::milliseconds timeout,
                                                           bool in_order) {
  auto shared = std::make_shared<Shared>(world_size, timeout, in_order);
  std::vector<std::unique_ptr<Transport>> out;
  for (int r = 0; r < world_size; ++r) out.push_back(std::make_unique<InProcessTransport>(shared, r));
  return out;
}

}  // namespace pipetrain::runtime
