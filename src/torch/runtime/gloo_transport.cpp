// Transport over c10d's ProcessGroupGloo. Rank 0 hosts the TCPStore used for the
// rendezvous (torchrun's agent hosts it under torchrun); replica groups get their own process group under a store prefix.
#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "host_staging.h"
#include "pipetrain/torch/transport.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/thread_priority.h"

namespace pipetrain::runtime {
namespace {

int intFromEnv(const char* name, int fallback, bool required) {
  const char* value = std::getenv(name);
  if (!value || !*value) {
    if (required) throw Error(std::string("environment variable ") + name + " is not set");
    return fallback;
  }
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  if (*end != '\0' || v < 0 || v > 1 << 30)
    throw Error(std::string("environment variable ") + name + "=\"" + value + "\" is not a non-negative integer");
  return static_cast<int>(v);
}

// PIPETRAIN_POLLING_NICE: the nice value for the threads Gloo's devices start, 0 (the
// training thread's own) where unset, at most kPollingThreadNice (util/thread_priority.h).
int pollingNiceFromEnv() {
  const int nice = intFromEnv("PIPETRAIN_POLLING_NICE", 0, false);
  if (nice > util::kPollingThreadNice)
    throw Error("environment variable PIPETRAIN_POLLING_NICE=\"" + std::to_string(nice) + "\" is above " +
                std::to_string(util::kPollingThreadNice) + ", the lowest priority");
  return nice;
}

class GlooOp : public PendingOp {
 public:
  GlooOp(c10::intrusive_ptr<c10d::Work> work, std::chrono::milliseconds timeout, std::string what)
      : work_(std::move(work)), timeout_(timeout), what_(std::move(what)) {}
  void wait() override {
    // Gloo reports a dead peer as a closed connection and a stuck one as a timeout.
    try {
      work_->wait(timeout_);
    } catch (const std::exception& e) {
      throw Error(what_ + " failed: " + errorMessage(e));
    }
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::chrono::milliseconds timeout_;
  std::string what_;
};

class GlooTransport : public Transport {
 public:
  explicit GlooTransport(const Rendezvous& rv)
      : rv_(rv), polling_nice_(pollingNiceFromEnv()), staging_(rv.timeout) {
    c10d::TCPStoreOptions options;
    options.port = static_cast<uint16_t>(rv.master_port);
    // Under torchrun's agent store, binding a second server on its port failed, and
    // c10d said so on stderr in every run before connecting as a client anyway.
    options.isServer = rv.rank == 0 && !rv.agent_store;
    options.numWorkers = rv.world_size;
    options.timeout = rv.timeout;
    try {
      store_ = c10::make_intrusive<c10d::TCPStore>(rv.master_addr, options);
      if (!rv.store_prefix.empty()) store_ = c10::make_intrusive<c10d::PrefixStore>(rv.store_prefix, store_);
    } catch (const std::exception& e) {
      throw Error("rank " + std::to_string(rv.rank) + ": cannot reach the rendezvous at " + rv.master_addr + ":" +
                  std::to_string(rv.master_port) + ": " + errorMessage(e));
    }
    world_ = makeGroup(store_, rv.rank, rv.world_size);
  }

  int rank() const override { return rv_.rank; }
  int worldSize() const override { return rv_.world_size; }
  std::string name() const override { return "gloo"; }

  // Gloo moves host memory: a GPU tensor goes through a pinned host copy (HostStaging).
  std::unique_ptr<PendingOp> send(const torch::Tensor& tensor, int to, uint32_t tag) override {
    return staging_.send(tensor, [this, to, tag](torch::Tensor host) -> std::unique_ptr<PendingOp> {
      std::vector<at::Tensor> tensors{std::move(host)};
      return std::make_unique<GlooOp>(world_->send(tensors, to, static_cast<int>(tag)), rv_.timeout,
                                      "rank " + std::to_string(rv_.rank) + ": send to rank " + std::to_string(to));
    });
  }

  std::unique_ptr<PendingOp> recv(torch::Tensor buffer, int from, uint32_t tag) override {
    return staging_.recv(buffer, [this, from, tag](torch::Tensor host) -> std::unique_ptr<PendingOp> {
      std::vector<at::Tensor> tensors{std::move(host)};
      return std::make_unique<GlooOp>(world_->recv(tensors, from, static_cast<int>(tag)), rv_.timeout,
                                      "rank " + std::to_string(rv_.rank) + ": receive from rank " + std::to_string(from));
    });
  }

  // The coordinator's sums, on CPU tensors.
  void allReduceSum(std::vector<torch::Tensor>& tensors, const std::vector<int>& group) override {
    if (tensors.empty()) return;
    // Gloo reduces a list of same-shaped tensors (one per local device), so the tensors
    // travel as one flat buffer: also one message instead of one per tensor.
    std::vector<at::Tensor> flat;
    for (const auto& t : tensors) flat.push_back(t.reshape({-1}).cpu());
    std::vector<at::Tensor> all{torch::cat(flat)};
    GlooOp(groupOf(coordinator_groups_, "group", group).allreduce(all), rv_.timeout, reductionWith(group)).wait();
    int64_t offset = 0;
    for (auto& t : tensors) {
      t.copy_(all[0].narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
  }

  // The data channel's sums (gradient buckets, losses), on the ranks' devices. NOTE(own
  // groups): they run in process groups of their own, apart from the coordinator's: Gloo
  // pairs a group's collectives by the order they start, and a GPU tensor's reduction
  // starts on the poster thread, later than the training thread's sums would.
  std::unique_ptr<PendingOp> startAllReduceSum(torch::Tensor flat, const std::vector<int>& group) override {
    c10d::ProcessGroupGloo& pg = groupOf(data_groups_, "data-group", group);
    return staging_.reduce(flat, [this, &pg, group](torch::Tensor host) -> std::unique_ptr<PendingOp> {
      std::vector<at::Tensor> list{std::move(host)};
      return std::make_unique<GlooOp>(pg.allreduce(list), rv_.timeout, reductionWith(group));
    });
  }

  void prepareGroup(const std::vector<int>& group) override { groupOf(data_groups_, "data-group", group); }

  void barrier() override {
    GlooOp(world_->barrier(), rv_.timeout, "rank " + std::to_string(rv_.rank) + ": barrier with " + peersOf(allRanks()))
        .wait();
  }

 private:
  // "rank 0: all-reduce with rank(s) 1, 2": the others of `group`, one of which a
  // collective that fails waited for (Gloo does not say which).
  std::string reductionWith(const std::vector<int>& group) const {
    return "rank " + std::to_string(rv_.rank) + ": all-reduce with " + peersOf(group);
  }
  std::string peersOf(const std::vector<int>& group) const {
    std::string out;
    for (int r : group)
      if (r != rv_.rank) out += (out.empty() ? "" : ", ") + std::to_string(r);
    return "rank(s) " + out;
  }

  using Groups = std::map<std::vector<int>, c10::intrusive_ptr<c10d::ProcessGroupGloo>>;

  // The process group of `group` among `groups`, made the first time it is used.
  c10d::ProcessGroupGloo& groupOf(Groups& groups, const std::string& kind, const std::vector<int>& group) {
    auto& pg = groups[group];
    if (!pg) {
      const GroupSlot slot = groupSlot(kind, group, rv_.rank);
      pg = makeGroup(c10::make_intrusive<c10d::PrefixStore>(slot.name, store_), slot.index,
                     static_cast<int>(group.size()));
    }
    return *pg;
  }

  c10::intrusive_ptr<c10d::ProcessGroupGloo> makeGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                       int size) {
    auto options = c10d::ProcessGroupGloo::Options::create(rv_.timeout);
    // GLOO_SOCKET_IFNAME names the interface, as in PyTorch; otherwise the address on
    // the route to the master (loopback for a single-machine job).
    const char* interface = std::getenv("GLOO_SOCKET_IFNAME");
    const auto createDevice = [&] {
      options->devices.push_back(interface && *interface
                                     ? c10d::ProcessGroupGloo::createDeviceForInterface(interface)
                                     : c10d::ProcessGroupGloo::createDeviceForHostname(
                                           localAddressToward(rv_.master_addr, rv_.master_port)));
    };
    // The device's polling thread yields to the training thread (util/thread_priority.h);
    // at 0 it keeps the training thread's priority, which it inherits, whatever that is.
    if (polling_nice_ > 0)
      util::lowerPriorityOfThreadsStartedBy(createDevice, polling_nice_);
    else
      createDevice();
    return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
  }

  Rendezvous rv_;
  int polling_nice_;  // the nice value of the threads its Gloo devices start
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> world_;
  Groups coordinator_groups_, data_groups_;
  HostStaging staging_;  // last: its poster thread stops before the groups go
};

}  // namespace

Rendezvous Rendezvous::fromEnvironment() {
  Rendezvous rv;
  if (const char* addr = std::getenv("MASTER_ADDR"); addr && *addr) rv.master_addr = addr;
  rv.master_port = intFromEnv("MASTER_PORT", rv.master_port, false);
  rv.rank = intFromEnv("RANK", 0, true);
  rv.world_size = intFromEnv("WORLD_SIZE", 1, true);
  if (const int attempt = intFromEnv("TORCHELASTIC_RESTART_COUNT", -1, false); attempt >= 0)
    rv.store_prefix = "/worker/attempt_" + std::to_string(attempt);
  if (const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE"))
    rv.agent_store = std::string(agent) == "True" || std::string(agent) == "true" || std::string(agent) == "1";
  if (rv.rank >= rv.world_size)
    throw Error("RANK=" + std::to_string(rv.rank) + " is not below WORLD_SIZE=" + std::to_string(rv.world_size));
  return rv;
}

int localRank(int fallback) { return intFromEnv("LOCAL_RANK", fallback, false); }

std::string errorMessage(const std::exception& e) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  return torch_error ? torch_error->what_without_backtrace() : e.what();
}

std::string localAddressToward(const std::string& master, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(master.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found)
    throw Error("MASTER_ADDR=" + master + ": cannot resolve the address");
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in local{};
  socklen_t len = sizeof local;
  const bool ok = fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  const int error = errno;
  freeaddrinfo(found);
  if (fd >= 0) close(fd);
  if (!ok) throw Error("MASTER_ADDR=" + master + ": no route to it from this host (" + std::strerror(error) + ")");
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &local.sin_addr, text, sizeof text);
  return text;
}

GroupSlot groupSlot(const std::string& kind, const std::vector<int>& group, int rank) {
  GroupSlot slot{kind, -1};
  for (std::size_t i = 0; i < group.size(); ++i) {
    slot.name += "-" + std::to_string(group[i]);
    if (group[i] == rank) slot.index = static_cast<int>(i);
  }
  if (slot.index < 0) throw Error("internal: rank " + std::to_string(rank) + " is not in its " + slot.name);
  return slot;
}

namespace {

// c10d's flight recorder (torch 2.11) records every operation of every process group
// in one process-wide buffer, and adds a group to its map before taking its lock: two
// groups whose first operations run at once (ranks that are threads of one process, a
// replica group's first reduction on an autograd thread) corrupted the map, and the
// torch tests crashed in 3 of 7 runs (c10d::FlightRecorder::recordWithResetEnabled,
// from ProcessGroupGloo::barrier). Its dumps serve NCCL hang debugging, which this
// transport does not use: it is switched off, unless the user asked for it.
void disableFlightRecorder() {
  static std::once_flag once;
  std::call_once(once, [] { setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0); });
}

}  // namespace

std::unique_ptr<Transport> makeGlooTransport(const Rendezvous& rendezvous) {
  disableFlightRecorder();
  return std::make_unique<GlooTransport>(rendezvous);
}

}  // namespace pipetrain::runtime
