// How ranks exchange tensors, in two roles: a DataChannel carries the Program's
// activations and gradients and the gradient buckets, on the ranks' devices; a
// Coordinator agrees on small CPU values (sizes, ids, totals, the clock, checkpoints).
// The executor talks only to the first, the trainer's bookkeeping only to the second,
// so a GPU channel (NCCL, makeNcclChannel) can carry the data while Gloo coordinates.
// Otherwise one Transport plays both: tests run whole pipelines in one process
// (InProcessTransport), and jobs on CPUs, or on GPUs through host copies, run over
// c10d's Gloo process group (GlooTransport).
//
// Messages between two ranks are matched by tag; shapes are known to both sides in
// advance (from the plan), so only the payload travels. Every wait is bounded: a peer
// that died or stopped answering turns into an Error naming it, never a hang.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "pipetrain/schedule/rank_facts.h"

namespace pipetrain::runtime {

// An operation in flight. wait() returns when it is complete, or throws Error.
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  virtual void wait() = 0;
};

// Message tags from here up (to INT32_MAX, Gloo's largest) are the runtime's own; the
// Program's activation and gradient tags (schedule::messageTag) stay below.
inline constexpr uint32_t kRuntimeTags = schedule::kMessageTags;

// What carries a Program's messages and a replicated stage's gradient buckets: tensors
// on the ranks' devices (activations, gradients), matched by tag. A channel that cannot
// match by tag (NCCL matches each pair of ranks in call order) needs every pair to post
// its messages in one order: schedule::validateInOrderDelivery checks a Program for it.
class DataChannel {
 public:
  virtual ~DataChannel() = default;
  virtual int rank() const = 0;
  virtual int worldSize() const = 0;

  // Starts sending `tensor` to rank `to`. The tensor must stay alive until wait().
  virtual std::unique_ptr<PendingOp> send(const torch::Tensor& tensor, int to, uint32_t tag) = 0;
  // Starts receiving into `buffer`, which has the message's shape, dtype and device.
  virtual std::unique_ptr<PendingOp> recv(torch::Tensor buffer, int from, uint32_t tag) = 0;
  // Starts summing one contiguous tensor in place over `group` (sorted, contains
  // rank()); it must stay alive until wait(). Every rank of the group starts its
  // reductions in the same order.
  virtual std::unique_ptr<PendingOp> startAllReduceSum(torch::Tensor flat, const std::vector<int>& group) = 0;
  // Readies the collectives of `group` (sorted, contains rank()) before their first use;
  // every rank of the group calls it, groups in the same order on every rank. A
  // reduction started later, from an autograd hook, then never waits for its peers to
  // connect: on a GPU such hooks run on the backward pass's own thread, which ranks that
  // are threads of one process share.
  virtual void prepareGroup(const std::vector<int>& group) { (void)group; }
  // Readies the connections to `peers` (sorted; the ranks this rank's Program exchanges
  // messages with) before the first message: every rank calls it once, before its
  // prepareGroup calls. A channel that connects each pair on first use (NCCL) would
  // otherwise block in a receive posted ahead until the peer's first message, which may
  // wait on this rank's sends.
  virtual void preparePeers(const std::vector<int>& peers) { (void)peers; }
  // What carries the data, for summaries: "in-process", "gloo" or "nccl".
  virtual std::string name() const = 0;
  // Whether its sums run in shared memory (runtime::makeShmChannel), which the simulator
  // prices at their own rates (job::LocalSums).
  virtual bool sumsInSharedMemory() const { return false; }
};

// What the ranks agree on besides the Program's messages, always as small CPU tensors:
// the dataset's size, the run's id, evaluation totals, checkpoint files, the trained
// weights gathered for export, the shared clock (tags from kRuntimeTags up) and
// barriers. It stays on the CPU (Gloo between processes) whatever carries the data, so
// a data channel needs nothing but tensors on its devices.
class Coordinator {
 public:
  virtual ~Coordinator() = default;
  virtual int rank() const = 0;
  virtual int worldSize() const = 0;

  virtual std::unique_ptr<PendingOp> send(const torch::Tensor& tensor, int to, uint32_t tag) = 0;
  virtual std::unique_ptr<PendingOp> recv(torch::Tensor buffer, int from, uint32_t tag) = 0;
  // Sums each tensor in place over the ranks of `group` (sorted, contains rank()).
  virtual void allReduceSum(std::vector<torch::Tensor>& tensors, const std::vector<int>& group) = 0;
  // Blocks until every rank has arrived.
  virtual void barrier() = 0;

  // 0, 1, ..., worldSize() - 1: the group of a collective over the whole job.
  std::vector<int> allRanks() const {
    std::vector<int> ranks(worldSize());
    for (int r = 0; r < worldSize(); ++r) ranks[r] = r;
    return ranks;
  }
};

// Both over one connection: Gloo between processes, or threads of one process. Tags
// keep the two kinds of message apart.
class Transport : public DataChannel, public Coordinator {
 public:
  int rank() const override = 0;
  int worldSize() const override = 0;
  std::unique_ptr<PendingOp> send(const torch::Tensor& tensor, int to, uint32_t tag) override = 0;
  std::unique_ptr<PendingOp> recv(torch::Tensor buffer, int from, uint32_t tag) override = 0;
};

// A moment every rank agrees on, each in its own steady clock: rank 0's now, carried to
// the others with NTP's estimate of the clocks' offset (of a few ping-pongs, the one with
// the shortest round trip). Ranks on one host share the monotonic clock and find offsets
// near zero; on different hosts the offset absorbs the clocks' difference, so timelines
// measured from this origin line up across ranks. Uses tags from kRuntimeTags up.
std::chrono::steady_clock::time_point sharedOrigin(Coordinator& coordinator);

// N transports for N ranks that live as threads of one process; for fast tests. With
// `in_order`, each Program message (a tag below kRuntimeTags) must also meet its
// receive in the order the pair posts them, as a channel that matches by order (NCCL)
// would pair them: a receive whose counterpart in the sender's order has another tag is
// an Error that names both. The tests prove with it that the executor keeps the order
// schedule::validateInOrderDelivery checks.
std::vector<std::unique_ptr<Transport>> makeInProcessGroup(int world_size, std::chrono::milliseconds timeout,
                                                           bool in_order = false);

// The rendezvous of torchrun: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE.
struct Rendezvous {
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int rank = 0;
  int world_size = 1;
  std::chrono::milliseconds timeout{60000};
  // Prefix of this start's keys in the store: "/worker/attempt_N" under torchrun, whose
  // store outlives its restarts (TORCHELASTIC_RESTART_COUNT=N, as torch's env://
  // rendezvous does); a restarted rank would otherwise read the dead ranks' addresses.
  std::string store_prefix;
  // torchrun's agent already serves the store at MASTER_PORT
  // (TORCHELASTIC_USE_AGENT_STORE): every rank, rank 0 too, connects to it as a client.
  bool agent_store = false;
  // Reads the variables above from the environment; missing or malformed ones are an
  // Error naming the variable.
  static Rendezvous fromEnvironment();
};

// LOCAL_RANK from the environment (torchrun's and the launcher's: the rank's index on its
// host), else `fallback`; a malformed value is an Error naming the variable.
int localRank(int fallback);

// This host, as the ranks of a job tell hosts apart: its name, its kernel's boot id (two
// machines, or containers on two machines, may share a name; one machine's ranks share
// its boot id) and its network namespace (namespaces of one machine are hosts of their
// own, joined by whatever links join them: bench/hosts; each new one a new host).
std::string hostIdentity();

// This host's address on the route to `master` (a name or an address; no packet is sent:
// connecting a UDP socket only picks the route): the interface its peers reach, whatever
// its host name resolves to. Error where `master` does not resolve or has no route.
std::string localAddressToward(const std::string& master, int port);

// What `e` says, in one line where LibTorch's errors (c10::Error) append their C++ stack
// trace: the message is what a user needs; the stack would bury it.
std::string errorMessage(const std::exception& e);

// The process group a transport makes for `group` (sorted, contains `rank`): its name
// among the transport's groups ("<kind>-1-2", its keys' prefix in the store) and `rank`'s
// index in it. Error where `rank` is not in `group`.
struct GroupSlot {
  std::string name;
  int index = 0;
};
GroupSlot groupSlot(const std::string& kind, const std::vector<int>& group, int rank);

// Gloo over TCP, rendezvous through c10d's TCPStore: torchrun's agent's, else one hosted by rank 0.
std::unique_ptr<Transport> makeGlooTransport(const Rendezvous& rendezvous);

// Whether this build carries NCCL (a CUDA build of LibTorch with c10d's NCCL backend).
bool ncclBuilt();
// A data channel over NCCL between ranks on distinct GPUs, this rank's on `device`
// (nccl_channel.cpp). It meets its peers through the rendezvous's store, which the Gloo
// transport of the same rendezvous must already host. Throws Error where the build has
// no NCCL.
std::unique_ptr<DataChannel> makeNcclChannel(const Rendezvous& rendezvous, const torch::Device& device);

// NOTE(shm-sums): ranks on one host sum their gradients in shared memory
// (shm_channel.cpp), and pass their messages on to `messages`. Gloo's all-reduce over
// loopback moves every byte through both ranks' sockets and I/O threads on the cores
// that train: 0.6 GB/s and ~0.55 ms a ring step here (job/local_cluster.cpp); in shared
// memory a sum is a few copies and two barriers a chunk. Each replica group maps a
// segment named `/pipetrain-<job_token>-g-<ranks>`, unlinked once every member mapped
// it. CPU tensors only. Its waits are bounded by `timeout`, and a peer whose process
// exited or whose sum failed is named at once.
std::unique_ptr<DataChannel> makeShmChannel(DataChannel& messages, const std::string& job_token,
                                            std::chrono::milliseconds timeout);

// The data channel of one rank of a job (channel_choice.cpp): NCCL where `wire` is
// "nccl", or "auto" and this build has NCCL and every rank a GPU of its own; sums in
// shared memory with messages over `transport` where `wire` is "shm", or "auto" and
// every rank computes on the CPU of one host (the ranks agree on both through
// `transport`); nullptr where `transport` carries all the data ("gloo", or "auto"
// otherwise). Every rank calls it with the same `wire`. "nccl" or "shm" where they
// cannot serve is an Error that says why.
std::unique_ptr<DataChannel> openDataChannel(const std::string& wire, const Rendezvous& rendezvous,
                                             const torch::Device& device, Transport& transport);

}  // namespace pipetrain::runtime
