#include "host_staging.h"

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "pipetrain/util/error.h"

namespace pipetrain::runtime {
namespace {

torch::Tensor pinnedLike(const torch::Tensor& t) {
  return torch::empty(t.sizes(), t.options().device(torch::kCPU).pinned_memory(true));
}

// The operation on the host copy, then (for a receive or reduction) its copy onto the
// device, queued behind the device's work so far: the host does not wait for it.
class CopyBackOp : public PendingOp {
 public:
  CopyBackOp(std::unique_ptr<PendingOp> op, torch::Tensor host, torch::Tensor device)
      : op_(std::move(op)), host_(std::move(host)), device_(std::move(device)) {}
  void wait() override {
    op_->wait();
    if (device_.defined()) device_.copy_(host_, /*non_blocking=*/true);
    device_.reset();
  }

 private:
  std::unique_ptr<PendingOp> op_;
  torch::Tensor host_, device_;
};

}  // namespace

// A device tensor's copy to the host, and the operation the poster starts on it.
struct HostStaging::Job {
  Job(c10::Event e, torch::Tensor h, Start s) : copied(std::move(e)), host(std::move(h)), start(std::move(s)) {}
  c10::Event copied;
  torch::Tensor host;
  Start start;
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::unique_ptr<PendingOp> op;
  std::exception_ptr error;
};

namespace {

class PostedOp : public PendingOp {
 public:
  PostedOp(std::shared_ptr<HostStaging::Job> job, std::chrono::milliseconds timeout) : job_(std::move(job)), timeout_(timeout) {}
  void wait() override {
    std::unique_lock<std::mutex> lock(job_->mutex);
    if (!job_->done_cv.wait_for(lock, timeout_, [&] { return job_->done; }))
      throw Error("a GPU tensor's copy to the host did not finish within the timeout");
    if (job_->error) std::rethrow_exception(job_->error);
    job_->op->wait();
  }

 private:
  std::shared_ptr<HostStaging::Job> job_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

HostStaging::HostStaging(std::chrono::milliseconds timeout) : timeout_(timeout) {}

HostStaging::~HostStaging() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (poster_.joinable()) poster_.join();
}

std::unique_ptr<PendingOp> HostStaging::send(const torch::Tensor& tensor, const Start& start) {
  if (tensor.device().is_cpu()) return start(tensor.is_contiguous() ? tensor : tensor.contiguous());
  return post(tensor, start, /*copy_back=*/false);
}

std::unique_ptr<PendingOp> HostStaging::recv(const torch::Tensor& buffer, const Start& start) {
  if (buffer.device().is_cpu()) return start(buffer);
  torch::Tensor host = pinnedLike(buffer);
  return std::make_unique<CopyBackOp>(start(host), host, buffer);
}

std::unique_ptr<PendingOp> HostStaging::reduce(const torch::Tensor& flat, const Start& start) {
  if (flat.device().is_cpu()) return start(flat);
  return post(flat, start, /*copy_back=*/true);
}

std::unique_ptr<PendingOp> HostStaging::post(const torch::Tensor& device, const Start& start, bool copy_back) {
  torch::Tensor host = pinnedLike(device);
  host.copy_(device, /*non_blocking=*/true);
  const c10::impl::VirtualGuardImpl guard(device.device().type());
  c10::Event copied(device.device().type());
  copied.record(guard.getStream(device.device()));
  auto job = std::make_shared<Job>(std::move(copied), host, start);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!poster_.joinable()) poster_ = std::thread([this] { run(); });
    jobs_.push_back(job);
  }
  wake_.notify_all();
  std::unique_ptr<PendingOp> posted = std::make_unique<PostedOp>(job, timeout_);
  if (!copy_back) return posted;
  return std::make_unique<CopyBackOp>(std::move(posted), host, device);
}

// In the order the jobs came: a group's reductions start in the same order on every rank.
void HostStaging::run() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = jobs_.front();
      jobs_.pop_front();
    }
    std::unique_ptr<PendingOp> op;
    std::exception_ptr error;
    try {
      job->copied.synchronize();
      op = job->start(job->host);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(job->mutex);
      job->op = std::move(op);
      job->error = error;
      job->done = true;
    }
    job->done_cv.notify_all();
  }
}

}  // namespace pipetrain::runtime
