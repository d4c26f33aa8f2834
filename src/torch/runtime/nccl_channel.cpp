// The data channel over NCCL (c10d's ProcessGroupNCCL), for ranks on distinct GPUs; the
// Gloo transport of the same rendezvous stays the Coordinator (docs/gpu.md).
//
// Each operation runs on the process group's own CUDA stream, ordered after the work
// queued so far on the current stream by a CUDA event; wait() orders the current stream
// after the operation and returns at once. So a stage computes micro-batch k+1 while k's
// activation is in flight, and a bucket's all-reduce overlaps the rest of the backward
// pass, with no host wait.
#include "pipetrain/torch/transport.h"
#include "pipetrain/util/error.h"

#ifdef USE_C10D_NCCL
#include <map>

#include <c10/cuda/CUDAGuard.h>
#include <torch/cuda.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif

namespace pipetrain::runtime {

#ifdef USE_C10D_NCCL
namespace {

class NcclOp : public PendingOp {
 public:
  NcclOp(c10::intrusive_ptr<c10d::Work> work, std::string what) : work_(std::move(work)), what_(std::move(what)) {}
  // A peer that never answers is c10d's watchdog's to find: past the process group's
  // timeout (--timeout) it ends the process, naming the operation.
  void wait() override {
    try {
      work_->wait();
    } catch (const c10::Error& e) {
      throw Error(what_ + " failed: " + e.what_without_backtrace());
    }
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::string what_;
};

class NcclChannel : public DataChannel {
 public:
  NcclChannel(const Rendezvous& rv, const torch::Device& device) : rv_(rv), device_(device) {
    if (!device.is_cuda()) throw Error("rank " + std::to_string(rv.rank) + ": NCCL carries tensors on GPUs, not on " + device.str());
    c10d::TCPStoreOptions options;
    options.port = static_cast<uint16_t>(rv.master_port);
    options.isServer = false;  // the Gloo transport's rank 0 hosts it
    options.waitWorkers = false;
    options.timeout = rv.timeout;
    try {
      store_ = c10::make_intrusive<c10d::TCPStore>(rv.master_addr, options);
    } catch (const std::exception& e) {
      throw Error("rank " + std::to_string(rv.rank) + ": NCCL cannot reach the rendezvous at " + rv.master_addr + ":" +
                  std::to_string(rv.master_port) + ": " + errorMessage(e));
    }
    store_ = c10::make_intrusive<c10d::PrefixStore>(rv.store_prefix + "/nccl", store_);
    // NOTE(two-directions): NCCL runs a pair's operations in order on one stream, and a
    // send holds that stream until its receive is posted. The Programs promise each
    // direction's order (schedule::validateInOrderDelivery), not one order of both
    // directions, so messages toward a higher rank and toward a lower one go through
    // two process groups, each with its own communicators and streams.
    up_ = makeGroup("up", rv.rank, rv.world_size);
    down_ = makeGroup("down", rv.rank, rv.world_size);
  }

  int rank() const override { return rv_.rank; }
  int worldSize() const override { return rv_.world_size; }
  std::string name() const override { return "nccl"; }

  std::unique_ptr<PendingOp> send(const torch::Tensor& tensor, int to, uint32_t tag) override {
    (void)tag;  // NCCL pairs messages by order (the Program keeps it)
    c10::cuda::CUDAGuard guard(device_);
    std::vector<at::Tensor> list{tensor.is_contiguous() ? tensor : tensor.contiguous()};
    return std::make_unique<NcclOp>(toward(to).send(list, to, 0), what("send to rank " + std::to_string(to)));
  }

  std::unique_ptr<PendingOp> recv(torch::Tensor buffer, int from, uint32_t tag) override {
    (void)tag;
    c10::cuda::CUDAGuard guard(device_);
    std::vector<at::Tensor> list{buffer};
    return std::make_unique<NcclOp>(fromPeer(from).recv(list, from, 0), what("receive from rank " + std::to_string(from)));
  }

  std::unique_ptr<PendingOp> startAllReduceSum(torch::Tensor flat, const std::vector<int>& group) override {
    c10::cuda::CUDAGuard guard(device_);
    std::vector<at::Tensor> list{flat};
    return std::make_unique<NcclOp>(groupOf(group).allreduce(list), what("all-reduce"));
  }

  // NCCL connects a pair's communicator on its first operation, blocking both sides until
  // the other arrives: one element each way, upward first, in the order of the pairs
  // (every rank takes its peers in increasing order, so the lowest pair left always has
  // both sides ready).
  void preparePeers(const std::vector<int>& peers) override {
    c10::cuda::CUDAGuard guard(device_);
    for (int peer : peers) {
      torch::Tensor out = torch::zeros({1}, torch::TensorOptions().device(device_));
      torch::Tensor in = torch::empty({1}, torch::TensorOptions().device(device_));
      if (peer > rv_.rank) {
        send(out, peer, 0)->wait();
        recv(in, peer, 0)->wait();
      } else {
        recv(in, peer, 0)->wait();
        send(out, peer, 0)->wait();
      }
    }
    torch::cuda::synchronize(device_.index());
  }

  void prepareGroup(const std::vector<int>& group) override {
    torch::Tensor one = torch::ones({1}, torch::TensorOptions().device(device_));
    startAllReduceSum(one, group)->wait();
    torch::cuda::synchronize(device_.index());
  }

 private:
  std::string what(const std::string& op) const { return "rank " + std::to_string(rv_.rank) + ": NCCL " + op; }

  c10d::ProcessGroupNCCL& toward(int to) { return to > rv_.rank ? *up_ : *down_; }
  c10d::ProcessGroupNCCL& fromPeer(int from) { return from < rv_.rank ? *up_ : *down_; }

  c10d::ProcessGroupNCCL& groupOf(const std::vector<int>& group) {
    auto& pg = groups_[group];
    if (!pg) {
      const GroupSlot slot = groupSlot("group", group, rv_.rank);
      pg = makeGroup(slot.name, slot.index, static_cast<int>(group.size()));
    }
    return *pg;
  }

  c10::intrusive_ptr<c10d::ProcessGroupNCCL> makeGroup(const std::string& name, int rank, int size) {
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = rv_.timeout;
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(c10::make_intrusive<c10d::PrefixStore>(name, store_), rank,
                                                       size, options);
  }

  Rendezvous rv_;
  torch::Device device_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> up_, down_;
  std::map<std::vector<int>, c10::intrusive_ptr<c10d::ProcessGroupNCCL>> groups_;
};

}  // namespace

bool ncclBuilt() { return true; }

std::unique_ptr<DataChannel> makeNcclChannel(const Rendezvous& rendezvous, const torch::Device& device) {
  return std::make_unique<NcclChannel>(rendezvous, device);
}

#else

bool ncclBuilt() { return false; }

std::unique_ptr<DataChannel> makeNcclChannel(const Rendezvous& rendezvous, const torch::Device& device) {
  (void)device;
  throw Error("rank " + std::to_string(rendezvous.rank) +
              ": this build has no NCCL (LibTorch without CUDA or without c10d's NCCL backend)");
}

#endif

}  // namespace pipetrain::runtime
