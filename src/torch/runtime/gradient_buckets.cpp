#include "gradient_buckets.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

namespace pipetrain::runtime {

struct GradientBuckets::Hooked {
  GradientBuckets* owner = nullptr;  // null once the buckets are gone
};

namespace {

// Runs after autograd accumulated a parameter's gradient: the value in .grad() is the
// sum over this backward pass and every earlier one since the last step.
class AfterAccumulation : public torch::autograd::FunctionPostHook {
 public:
  AfterAccumulation(std::function<void()> done) : done_(std::move(done)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    done_();
    return outputs;
  }

 private:
  std::function<void()> done_;
};

}  // namespace

GradientBuckets::GradientBuckets(std::vector<torch::Tensor> params, std::vector<int> group, DataChannel& channel,
                                 int64_t bucket_bytes)
    : params_(std::move(params)), group_(std::move(group)), channel_(channel),
      hooked_(std::make_shared<Hooked>()) {
  hooked_->owner = this;
  channel_.prepareGroup(group_);
  bucket_of_.assign(params_.size(), -1);
  std::vector<std::vector<std::size_t>> members;
  int64_t bytes = bucket_bytes;  // forces a first bucket
  for (std::size_t k = params_.size(); k-- > 0;) {
    if (bytes >= bucket_bytes) {
      members.emplace_back();
      bytes = 0;
    }
    members.back().push_back(k);
    bytes += static_cast<int64_t>(params_[k].numel() * params_[k].element_size());
  }
  torch::NoGradGuard no_grad;
  for (const auto& bucket : members) {
    int64_t numel = 0;
    for (std::size_t k : bucket) numel += params_[k].numel();
    torch::Tensor flat = torch::zeros({numel}, params_[bucket.front()].options());
    int64_t offset = 0;
    for (std::size_t k : bucket) {
      params_[k].mutable_grad() = flat.narrow(0, offset, params_[k].numel()).view_as(params_[k]);
      offset += params_[k].numel();
      bucket_of_[k] = static_cast<int>(flat_.size());
    }
    flat_.push_back(flat);
  }
  for (std::size_t k = 0; k < params_.size(); ++k) {
    std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(params_[k]);
    std::weak_ptr<Hooked> hooked = hooked_;
    acc->add_post_hook(std::make_unique<AfterAccumulation>([hooked, k] {
      if (auto h = hooked.lock(); h && h->owner) h->owner->gradientFinal(k);
    }));
    accumulators_.push_back(std::move(acc));
  }
}

GradientBuckets::~GradientBuckets() { hooked_->owner = nullptr; }

void GradientBuckets::arm() {
  pending_.assign(flat_.size(), 0);
  for (int b : bucket_of_) ++pending_[b];
  next_ = 0;
  ops_.clear();
  armed_ = true;
}

void GradientBuckets::gradientFinal(std::size_t param) {
  if (!armed_) return;  // a backward pass that only accumulates
  --pending_[bucket_of_[param]];
  startReady();
}

// Buckets start in index order on every replica (Gloo matches collectives by order),
// so a bucket that is final waits for the buckets before it.
void GradientBuckets::startReady() {
  for (; next_ < flat_.size() && pending_[next_] == 0; ++next_)
    ops_.push_back(channel_.startAllReduceSum(flat_[next_], group_));
}

void GradientBuckets::finish() {
  if (!armed_) arm();
  std::fill(pending_.begin(), pending_.end(), 0);
  startReady();
  for (auto& op : ops_) op->wait();
  ops_.clear();
  armed_ = false;
}

}  // namespace pipetrain::runtime
