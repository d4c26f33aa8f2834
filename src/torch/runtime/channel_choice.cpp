// Which channel carries a job's data: NCCL between ranks on GPUs of their own, sums in
// shared memory between CPU ranks of one host, Gloo otherwise (docs/gpu.md,
// docs/runtime.md).
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>

#include "pipetrain/torch/device.h"
#include "pipetrain/torch/transport.h"
#include "pipetrain/torch/wire_choice.h"
#include "pipetrain/util/error.h"

namespace pipetrain::runtime {
namespace {

// What every rank needs to know of all, to choose alike.
struct JobFacts {
  std::vector<int64_t> hosts;  // per rank: a hash of its host's name and boot id
  std::vector<int64_t> gpus;   // per rank: 1 + its GPU's index where NCCL could use it, else 0
  bool cpus = true;            // every rank computes on the CPU
  int64_t token = 0;           // rank 0's random number: names this job's shared memory
};

// Each rank writes its own entries and a sum over the job gives all of them to all.
JobFacts gatherFacts(Coordinator& coordinator, const torch::Device& device) {
  const std::string host = hostIdentity();
  const int n = coordinator.worldSize(), me = coordinator.rank();
  torch::Tensor all = torch::zeros({3 * n + 1}, torch::kLong);
  all[me] = static_cast<int64_t>(std::hash<std::string>{}(host) & ((int64_t{1} << 40) - 1));
  if (deviceKind(device).ncclCapable()) all[n + me] = device.index() + 1;
  all[2 * n + me] = device.is_cpu() ? 0 : 1;
  if (me == 0) all[3 * n] = static_cast<int64_t>(std::random_device{}() & 0x7fffffff) << 16 | (::getpid() & 0xffff);
  std::vector<torch::Tensor> list{all};
  coordinator.allReduceSum(list, coordinator.allRanks());
  const int64_t* v = all.data_ptr<int64_t>();
  JobFacts facts;
  facts.hosts.assign(v, v + n);
  facts.gpus.assign(v + n, v + 2 * n);
  for (int r = 0; r < n; ++r) facts.cpus = facts.cpus && v[2 * n + r] == 0;
  facts.token = v[3 * n];
  return facts;
}

// Why NCCL cannot carry this job's data, or "" where it can.
std::string whyNotNccl(const JobFacts& facts) {
  if (!ncclBuilt()) return "this build has no NCCL";
  for (int r = 0; r < static_cast<int>(facts.gpus.size()); ++r) {
    if (facts.gpus[r] == 0) return "rank " + std::to_string(r) + " has no GPU";
    for (int q = 0; q < r; ++q)
      if (facts.hosts[q] == facts.hosts[r] && facts.gpus[q] == facts.gpus[r])
        return "ranks " + std::to_string(q) + " and " + std::to_string(r) +
               " share a GPU, which NCCL refuses (\"Duplicate GPU detected\"; use --wire gloo)";
  }
  return "";
}

// The first rank on another host than rank 0's; -1 where they share one.
int otherHost(const JobFacts& facts) {
  for (int r = 1; r < static_cast<int>(facts.hosts.size()); ++r)
    if (facts.hosts[r] != facts.hosts[0]) return r;
  return -1;
}

// Why shared memory cannot carry this job's sums, or "" where it can.
std::string whyNotShm(const JobFacts& facts) {
  if (!facts.cpus) return "not every rank computes on the CPU";
  if (const int r = otherHost(facts); r >= 0) return "rank " + std::to_string(r) + " is on another host than rank 0";
  return "";
}

// This process's network namespace: its cookie, which the kernel never gives another
// namespace until it reboots (a namespace's inode number is reused once it is gone: two
// sets of bench/hosts namespaces one after the other got the same ones), else its inode.
std::string networkNamespace() {
#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71  // Linux 5.14
#endif
  if (const int fd = socket(AF_INET, SOCK_DGRAM, 0); fd >= 0) {
    uint64_t cookie = 0;
    socklen_t length = sizeof cookie;
    const bool ok = getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &length) == 0;
    close(fd);
    if (ok) return "netns cookie " + std::to_string(cookie);
  }
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/self/ns/net", ec).string();
}

}  // namespace

std::string hostIdentity() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  std::getline(boot, boot_id);
  return std::string(host) + "/" + boot_id + "/" + networkNamespace();
}

bool sumsInSharedMemory(const std::string& wire, bool cpu_ranks, bool one_host) {
  return (wire == "shm" || wire == "auto") && cpu_ranks && one_host;
}

std::unique_ptr<DataChannel> openDataChannel(const std::string& wire, const Rendezvous& rendezvous,
                                             const torch::Device& device, Transport& transport) {
  if (wire == "gloo") return nullptr;
  if (wire != "auto" && wire != "nccl" && wire != "shm")
    throw Error("--wire " + wire + ": expected auto, gloo, shm or nccl");
  const JobFacts facts = gatherFacts(transport, device);
  if (wire != "shm") {
    const std::string why = whyNotNccl(facts);
    if (why.empty()) return makeNcclChannel(rendezvous, device);
    if (wire == "nccl") throw Error("--wire nccl: " + why + " (NCCL needs a GPU of its own per rank; use --wire gloo)");
  }
  if (sumsInSharedMemory(wire, facts.cpus, otherHost(facts) < 0))
    return makeShmChannel(transport, std::to_string(facts.token), rendezvous.timeout);
  if (wire == "shm")
    throw Error("--wire shm: " + whyNotShm(facts) + " (shared memory serves CPU ranks of one host; use --wire gloo)");
  return nullptr;
}

}  // namespace pipetrain::runtime
