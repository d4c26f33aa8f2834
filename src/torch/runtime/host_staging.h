// How a transport that moves host memory (Gloo) carries tensors that live on a GPU,
// without the training thread waiting for the GPU: a device tensor is copied into pinned
// host memory behind the work that computes it, and a poster thread starts the transport's
// operation once that copy is done; what arrives in pinned memory is copied onto the
// device behind the work queued so far. CPU tensors pass straight through.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include <torch/torch.h>

#include "pipetrain/torch/transport.h"

namespace pipetrain::runtime {

class HostStaging {
 public:
  // Starts the operation on host tensors (Gloo's send, receive or all-reduce).
  using Start = std::function<std::unique_ptr<PendingOp>(torch::Tensor host)>;

  explicit HostStaging(std::chrono::milliseconds timeout);
  ~HostStaging();

  // Sends `tensor`: a device tensor's pinned copy is queued behind the work that computes
  // it and handed to `start` on the poster thread once it is complete.
  std::unique_ptr<PendingOp> send(const torch::Tensor& tensor, const Start& start);
  // Receives into `buffer`: `start` fills a pinned host buffer, and wait() queues its copy
  // onto the device.
  std::unique_ptr<PendingOp> recv(const torch::Tensor& buffer, const Start& start);
  // Reduces `flat` in place: out through the poster as a send, back as a receive.
  std::unique_ptr<PendingOp> reduce(const torch::Tensor& flat, const Start& start);

 struct Job;  // one staged operation and what its waiter needs (host_staging.cpp)

 private:
  std::unique_ptr<PendingOp> post(const torch::Tensor& device, const Start& start, bool copy_back);
  void run();

  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> jobs_;
  bool stopping_ = false;
  std::thread poster_;  // started on the first device tensor
};

}  // namespace pipetrain::runtime
