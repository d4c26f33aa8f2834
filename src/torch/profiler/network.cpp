// profileNetwork() and clusterFromNetwork(): latency and bandwidth between ranks over
// the real transport, and the ClusterSpec they imply (docs/profiling.md#network-pipetrain-profile-network).
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "pipetrain/cluster/chain_order.h"
#include "pipetrain/torch/device.h"
#include "pipetrain/torch/profiler.h"
#include "pipetrain/torch/transport.h"
#include "pipetrain/util/clock.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/stats.h"

namespace pipetrain::profiler {
namespace {

using Clock = std::chrono::steady_clock;
using util::median;

// Tags of the profile's messages (one pair of ranks talks at a time, so they repeat).
constexpr uint32_t kHostTag = 0x7fff0100u, kInfoTag = 0x7fff0101u, kPingTag = 0x7fff0102u,
                   kPongTag = 0x7fff0103u, kDataTag = 0x7fff0104u, kAckTag = 0x7fff0105u,
                   kCpuTag = 0x7fff0106u, kPairCountTag = 0x7fff0107u, kPairsTag = 0x7fff0108u,
                   kResultTag = 0x7fff0109u;
// A rank's host name and its address, each zero-terminated in its half of one message.
constexpr int64_t kHostBytes = 256, kAddressOffset = 192;

// CPU seconds this process has used, all its threads (Gloo's I/O threads included).
double processCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// ----- who runs where: every rank tells rank 0 -------------------------------------------

// A rank's host: its identity where it said it (network namespaces of one machine share
// its name), else its name.
std::string hostOf(const RankHost& h) { return h.host_id != 0 ? std::to_string(h.host_id) : h.host; }

// Bytes/s of the slower direction of a copy between `device` and pinned host memory, as
// the Gloo channel makes them (runtime/host_staging.h): the median of `repeats` timed
// copies each way after one of each.
double hostLinkBandwidth(const torch::Device& device, int64_t bytes, int repeats) {
  const torch::Tensor host = torch::zeros({bytes}, torch::TensorOptions(torch::kUInt8).pinned_memory(true));
  const torch::Tensor on_device = torch::zeros({bytes}, torch::TensorOptions(torch::kUInt8).device(device));
  auto timed = [&](const torch::Tensor& to, const torch::Tensor& from) {
    runtime::deviceKind(device).synchronize(device);
    const auto start = Clock::now();
    to.copy_(from, /*non_blocking=*/true);
    runtime::deviceKind(device).synchronize(device);
    return secondsSince(start);
  };
  timed(on_device, host);
  timed(host, on_device);
  std::vector<double> in, out;
  for (int i = 0; i < repeats; ++i) {
    in.push_back(timed(on_device, host));
    out.push_back(timed(host, on_device));
  }
  return static_cast<double>(bytes) / std::max(median(in), median(out));
}

void sendHost(runtime::Transport& t, const RankHost& self) {
  torch::Tensor name = torch::zeros({kHostBytes}, torch::kUInt8);
  char* text = static_cast<char*>(name.data_ptr());
  std::memcpy(text, self.host.data(), std::min<std::size_t>(self.host.size(), kAddressOffset - 1));
  std::memcpy(text + kAddressOffset, self.address.data(),
              std::min<std::size_t>(self.address.size(), kHostBytes - kAddressOffset - 1));
  torch::Tensor info = torch::tensor({static_cast<int64_t>(self.local_rank), self.physical_memory_bytes,
                                      self.gpu_memory_bytes, static_cast<int64_t>(self.host_link_bandwidth),
                                      static_cast<int64_t>(self.threads), self.host_id},
                                     torch::kLong);
  auto a = t.send(name, 0, kHostTag);
  auto b = t.send(info, 0, kInfoTag);
  a->wait();
  b->wait();
}

RankHost receiveHost(runtime::Transport& t, int from) {
  torch::Tensor name = torch::zeros({kHostBytes}, torch::kUInt8);
  torch::Tensor info = torch::zeros({6}, torch::kLong);
  t.recv(name, from, kHostTag)->wait();
  t.recv(info, from, kInfoTag)->wait();
  RankHost h;
  const char* text = static_cast<const char*>(name.data_ptr());  // zero-terminated halves
  h.host = std::string(text);
  h.address = std::string(text + kAddressOffset);
  h.local_rank = static_cast<int>(info[0].item<int64_t>());
  h.physical_memory_bytes = info[1].item<int64_t>();
  h.gpu_memory_bytes = info[2].item<int64_t>();
  h.host_link_bandwidth = static_cast<double>(info[3].item<int64_t>());
  h.threads = static_cast<int>(info[4].item<int64_t>());
  h.host_id = info[5].item<int64_t>();
  return h;
}

// ----- one rank against a peer ------------------------------------------------------------

// The measuring rank's side. Latency: half the median round trip of a small message.
// Bandwidth for size S: the median time of S bytes there and a small acknowledgement
// back, less one small round trip (the two latencies it contains), gives S / bandwidth.
// Host CPU per message: both processes' CPU time over the timed rounds (the peer sends
// its own), the small round trips giving a small message's share and the rounds of S
// bytes, less their small acknowledgement, an S-byte message's.
//
// NOTE(warm-up by time): right after start-up, round trips over loopback took many times
// longer for their first milliseconds than afterwards (docs/profiling.md, "Network:
// `pipetrain profile-network`"), so warm-up pings go on for warmup_seconds, not for a
// fixed count. The peer cannot know how many pings that is: the first byte of each ping
// says what follows (kWarmupPing, kTimedPing, kLastPing).
constexpr uint8_t kLastPing = 0, kTimedPing = 1, kWarmupPing = 2;

PairMeasurement measurePeer(runtime::Transport& t, int peer, const NetworkOptions& o, torch::Tensor& data) {
  torch::Tensor ping = torch::ones({o.latency_bytes}, torch::kUInt8);
  torch::Tensor small = torch::zeros({o.latency_bytes}, torch::kUInt8);
  PairMeasurement m;
  m.from = t.rank();
  m.peer = peer;
  auto pingPong = [&](uint8_t kind) {
    ping[0] = kind;
    const auto start = Clock::now();
    t.send(ping, peer, kPingTag)->wait();
    t.recv(small, peer, kPongTag)->wait();
    return secondsSince(start);
  };
  const auto warmup_start = Clock::now();
  for (int i = 0; i < o.warmup || secondsSince(warmup_start) < o.warmup_seconds; ++i) pingPong(kWarmupPing);
  std::vector<double> round_trips, cpu;  // cpu: per round, the ping-pongs' and then each size's
  double cpu_start = processCpuSeconds();
  for (int i = 0; i < o.repeats; ++i) round_trips.push_back(pingPong(i + 1 == o.repeats ? kLastPing : kTimedPing));
  cpu.push_back((processCpuSeconds() - cpu_start) / o.repeats);
  const double round_trip = median(round_trips);
  m.latency_seconds = round_trip / 2;
  for (int64_t size : o.sizes) {
    const torch::Tensor message = data.narrow(0, 0, size);
    std::vector<double> times;
    for (int i = 0; i < o.warmup + o.repeats; ++i) {
      if (i == o.warmup) cpu_start = processCpuSeconds();
      const auto start = Clock::now();
      t.send(message, peer, kDataTag)->wait();
      t.recv(small, peer, kAckTag)->wait();
      if (i >= o.warmup) times.push_back(secondsSince(start));
    }
    cpu.push_back((processCpuSeconds() - cpu_start) / o.repeats);
    const double time = median(times);
    // Where the transfer hides inside the latency's noise, credit the whole time.
    const double transfer = time - round_trip > 0.05 * time ? time - round_trip : time;
    m.bandwidth.push_back(static_cast<double>(size) / transfer);
  }
  torch::Tensor peer_cpu = torch::zeros({static_cast<int64_t>(cpu.size())}, torch::kDouble);
  t.recv(peer_cpu, peer, kCpuTag)->wait();
  // A round trip of small messages is two messages, each paid for on both sides: 4
  // overheads. A round of S bytes is 4 overheads and the S bytes on both sides.
  m.overhead_seconds = std::max(0.0, (cpu[0] + peer_cpu[0].item<double>()) / 4);
  for (std::size_t i = 1; i < cpu.size(); ++i)
    m.message_cpu_seconds.push_back(
        std::max(0.0, (cpu[i] + peer_cpu[static_cast<int64_t>(i)].item<double>()) / 2 - 2 * m.overhead_seconds));
  return m;
}

// The peer's side: answer every ping and every message from `from`, in the same order,
// then tell it the CPU time it spent per timed round.
void answerPeer(runtime::Transport& t, int from, const NetworkOptions& o, torch::Tensor& data) {
  torch::Tensor small = torch::zeros({o.latency_bytes}, torch::kUInt8);
  std::vector<double> cpu;
  double cpu_start = processCpuSeconds();
  for (uint8_t kind = kWarmupPing; kind != kLastPing;) {
    t.recv(small, from, kPingTag)->wait();
    kind = small[0].item<uint8_t>();
    t.send(small, from, kPongTag)->wait();
    if (kind == kWarmupPing) cpu_start = processCpuSeconds();  // the timed ones start after it
  }
  cpu.push_back((processCpuSeconds() - cpu_start) / o.repeats);
  for (int64_t size : o.sizes) {
    torch::Tensor message = data.narrow(0, 0, size);
    for (int i = 0; i < o.warmup + o.repeats; ++i) {
      if (i == o.warmup) cpu_start = processCpuSeconds();
      t.recv(message, from, kDataTag)->wait();
      t.send(small, from, kAckTag)->wait();
    }
    cpu.push_back((processCpuSeconds() - cpu_start) / o.repeats);
  }
  t.send(torch::tensor(cpu, torch::kDouble), from, kCpuTag)->wait();
}

// ----- the pairs between hosts rank 0 is not on -------------------------------------------

// Between every two hosts rank 0 is on neither of: their first ranks, in host order.
std::vector<std::pair<int, int>> pairsBeyondRankZero(const std::vector<RankHost>& ranks) {
  std::vector<std::string> hosts;
  std::vector<int> first;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const std::string h = hostOf(ranks[r]);
    if (h == hostOf(ranks[0]) || std::find(hosts.begin(), hosts.end(), h) != hosts.end()) continue;
    hosts.push_back(h);
    first.push_back(static_cast<int>(r));
  }
  std::vector<std::pair<int, int>> pairs;
  for (std::size_t i = 0; i < first.size(); ++i)
    for (std::size_t j = i + 1; j < first.size(); ++j) pairs.emplace_back(first[i], first[j]);
  return pairs;
}

// Rank 0 tells every other rank the pairs; returns them on every rank.
std::vector<std::pair<int, int>> sharePairs(runtime::Transport& t, const std::vector<std::pair<int, int>>& pairs) {
  if (t.rank() == 0) {
    std::vector<int64_t> flat;
    for (const auto& [a, b] : pairs) flat.insert(flat.end(), {a, b});
    const torch::Tensor count = torch::tensor({static_cast<int64_t>(pairs.size())}, torch::kLong);
    const torch::Tensor list = torch::tensor(flat.empty() ? std::vector<int64_t>{0} : flat, torch::kLong);
    for (int r = 1; r < t.worldSize(); ++r) {
      t.send(count, r, kPairCountTag)->wait();
      t.send(list, r, kPairsTag)->wait();
    }
    return pairs;
  }
  torch::Tensor count = torch::zeros({1}, torch::kLong);
  t.recv(count, 0, kPairCountTag)->wait();
  const int64_t n = count[0].item<int64_t>();
  torch::Tensor list = torch::zeros({std::max<int64_t>(1, 2 * n)}, torch::kLong);
  t.recv(list, 0, kPairsTag)->wait();
  std::vector<std::pair<int, int>> out;
  for (int64_t i = 0; i < n; ++i)
    out.emplace_back(static_cast<int>(list[2 * i].item<int64_t>()), static_cast<int>(list[2 * i + 1].item<int64_t>()));
  return out;
}

// A measurement, from the rank that took it to rank 0, as one tensor of doubles:
// latency, overhead, then per size its bandwidth and its CPU time.
void sendMeasurement(runtime::Transport& t, const PairMeasurement& m) {
  std::vector<double> flat{m.latency_seconds, m.overhead_seconds};
  flat.insert(flat.end(), m.bandwidth.begin(), m.bandwidth.end());
  flat.insert(flat.end(), m.message_cpu_seconds.begin(), m.message_cpu_seconds.end());
  t.send(torch::tensor(flat, torch::kDouble), 0, kResultTag)->wait();
}

PairMeasurement receiveMeasurement(runtime::Transport& t, int from, int peer, std::size_t sizes) {
  torch::Tensor flat = torch::zeros({static_cast<int64_t>(2 + 2 * sizes)}, torch::kDouble);
  t.recv(flat, from, kResultTag)->wait();
  const auto at = [&](std::size_t i) { return flat[static_cast<int64_t>(i)].item<double>(); };
  PairMeasurement m;
  m.from = from;
  m.peer = peer;
  m.latency_seconds = at(0);
  m.overhead_seconds = at(1);
  for (std::size_t i = 0; i < sizes; ++i) {
    m.bandwidth.push_back(at(2 + i));
    m.message_cpu_seconds.push_back(at(2 + sizes + i));
  }
  return m;
}

// An all-reduce this small costs its fixed part: its bytes take ~0.1 ms at the slowest
// rates measured here.
constexpr int64_t kFixedCostBytes = 64 << 10;
// The all-reduce whose bytes the rate is read from grows until it takes this many times
// the fixed part (so its bytes take three quarters of it), by 4x a time, up to
// kMaxAllreduceBytes. At 2 MiB, the size a job measures, the fixed part took most of the
// time on a fast link: what was left gave no rate, and the planner priced data
// parallelism's all-reduce at the messages' bandwidth (docs/profiling.md, "The
// all-reduce").
constexpr double kAllreduceOverFixed = 4;
constexpr int64_t kMaxAllreduceBytes = int64_t{64} << 20;

// Every rank: an all-reduce of `bytes` over all ranks, as data-parallel replicas reduce
// their gradients (float sums): its median and mean time, and the median process CPU
// time it took.
struct AllReduceTimes {
  double median = 0, mean = 0, cpu = 0;
};
AllReduceTimes timeAllReduce(runtime::Transport& t, runtime::DataChannel& sums, int64_t bytes,
                             const NetworkOptions& o) {
  const std::vector<int> everyone = t.allRanks();
  const torch::Tensor gradients = torch::ones({std::max<int64_t>(1, bytes / 4)}, torch::kFloat);
  std::vector<double> times, cpu;
  for (int i = 0; i < o.warmup + o.repeats; ++i) {
    t.barrier();  // all start together: the time is the reduction's, not the stragglers'
    const double cpu_start = processCpuSeconds();
    const auto start = Clock::now();
    sums.startAllReduceSum(gradients, everyone)->wait();
    if (i >= o.warmup) {
      times.push_back(secondsSince(start));
      cpu.push_back(processCpuSeconds() - cpu_start);
    }
  }
  double sum = 0;
  for (double x : times) sum += x;
  return {median(times), sum / static_cast<double>(times.size()), median(cpu)};
}

}  // namespace

RankHost thisHost(int local_rank, const runtime::Rendezvous& job, const torch::Device& device, int64_t link_bytes,
                  int repeats) {
  RankHost h;
  char name[kAddressOffset] = {};
  if (gethostname(name, sizeof name - 1) != 0 || !name[0]) std::strcpy(name, "localhost");
  h.host = name;
  h.address = runtime::localAddressToward(job.master_addr, job.master_port);
  h.host_id = static_cast<int64_t>(std::hash<std::string>{}(runtime::hostIdentity()) >> 1);
  h.local_rank = local_rank;
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  h.physical_memory_bytes = pages > 0 && page_size > 0 ? static_cast<int64_t>(pages) * page_size : 0;
  if (device.is_cpu()) {
    h.threads = computeThreads();
  } else {  // a device of its own, fed through pinned host memory
    h.gpu_memory_bytes = runtime::deviceMemoryBytes(device);
    h.host_link_bandwidth = hostLinkBandwidth(device, link_bytes, repeats);
  }
  return h;
}

NetworkProfile profileNetwork(runtime::Transport& t, const RankHost& self, const NetworkOptions& options,
                              runtime::DataChannel* sums) {
  // Smallest size first: the cluster takes the largest message's figures from the back.
  NetworkOptions o = options;
  std::sort(o.sizes.begin(), o.sizes.end());
  const int world = t.worldSize();
  if (world < 2) throw Error("profile-network: needs at least 2 ranks to measure between, this job has 1");
  if (o.sizes.empty()) throw Error("profile-network: no message sizes to measure bandwidth with");
  for (int64_t s : o.sizes)
    if (s < 1) throw Error("profile-network: message sizes must be positive, not " + std::to_string(s));
  if (o.latency_bytes < 1 || o.repeats < 1 || o.warmup < 0 || !(o.warmup_seconds >= 0))
    throw Error("profile-network: needs a positive small-message size, repeats >= 1 and warm-up >= 0");

  NetworkProfile p;
  p.sizes = o.sizes;
  torch::Tensor data = torch::zeros({o.sizes.back()}, torch::kUInt8);
  if (t.rank() == 0) {
    p.ranks.push_back(self);
    for (int r = 1; r < world; ++r) p.ranks.push_back(receiveHost(t, r));
    for (int r = 1; r < world; ++r) p.pairs.push_back(measurePeer(t, r, o, data));
  } else {
    sendHost(t, self);
    answerPeer(t, 0, o, data);
  }
  // One pair at a time: two pairs measured at once would share this machine's cores, or
  // a switch.
  const auto beyond = t.rank() == 0 ? pairsBeyondRankZero(p.ranks) : std::vector<std::pair<int, int>>{};
  for (const auto& [a, b] : sharePairs(t, beyond)) {
    t.barrier();
    if (t.rank() == a) sendMeasurement(t, measurePeer(t, b, o, data));
    if (t.rank() == b) answerPeer(t, a, o, data);
    if (t.rank() == 0) p.pairs.push_back(receiveMeasurement(t, a, b, o.sizes.size()));
  }
  runtime::DataChannel& summing = sums ? *sums : static_cast<runtime::DataChannel&>(t);
  summing.prepareGroup(t.allRanks());
  // A small one: what every all-reduce costs beyond its bytes. Its mean, since a run's
  // iteration pays every slow one: on a 2-core host a tenth of them wait a scheduler
  // tick for a core. Of gradient size, not a few bytes: over Gloo a few bytes cost far
  // less than any gradient bucket (docs/profiling.md, "The all-reduce").
  NetworkOptions small = o;
  small.repeats = std::max(o.repeats, 50);
  const AllReduceTimes tiny = timeAllReduce(t, summing, kFixedCostBytes, small);
  int64_t bytes = o.sizes.back();
  AllReduceTimes large = timeAllReduce(t, summing, bytes, o);
  while (bytes < kMaxAllreduceBytes) {
    // Every rank goes on, or none: the vote is itself an all-reduce.
    const torch::Tensor votes =
        torch::full({1}, large.median < kAllreduceOverFixed * tiny.mean ? 1.0F : 0.0F, torch::kFloat);
    summing.startAllReduceSum(votes, t.allRanks())->wait();
    if (votes.item<float>() == 0) break;
    bytes = std::min(bytes * 4, kMaxAllreduceBytes);
    large = timeAllReduce(t, summing, bytes, o);
  }
  if (t.rank() == 0) {
    p.allreduce_seconds = large.median;
    p.allreduce_bytes = bytes;
    p.allreduce_cpu_seconds = large.cpu;
    p.small_allreduce_seconds = tiny.mean;
  }
  t.barrier();  // nobody leaves (and closes its connections) while rank 0 still measures
  return p;
}

cluster::ClusterSpec clusterFromNetwork(const NetworkProfile& p) {
  const int world = static_cast<int>(p.ranks.size());
  const auto from_zero =
      std::count_if(p.pairs.begin(), p.pairs.end(), [](const PairMeasurement& m) { return m.from == 0; });
  if (world < 2 || from_zero != world - 1)
    throw Error("network profile: expected rank 0's measurements against " + std::to_string(world - 1) +
                " other ranks, found " + std::to_string(from_zero));
  // Devices grouped by host (in order of first appearance), then by local rank, so that
  // a host's devices form one level-0 group.
  const auto hostOfRank = [&](int r) { return hostOf(p.ranks[r]); };
  std::vector<std::string> hosts;
  std::map<std::string, std::vector<int>> ranks_of;
  std::map<std::string, std::set<std::string>> hosts_named;  // host name -> its hosts
  for (int r = 0; r < world; ++r) {
    const std::string h = hostOfRank(r);
    if (!ranks_of.count(h)) hosts.push_back(h);
    ranks_of[h].push_back(r);
    hosts_named[p.ranks[r].host].insert(h);
  }
  // Devices are named by their host's name, or by its address where hosts share a name.
  const auto deviceName = [&](int r) {
    const RankHost& rh = p.ranks[r];
    const bool by_address = hosts_named[rh.host].size() > 1 && !rh.address.empty();
    return (by_address ? rh.address : rh.host) + "-" + std::to_string(rh.local_rank);
  };
  std::vector<cluster::Device> devices;
  bool through_host = false;  // GPUs talked over Gloo, through host memory
  for (const std::string& h : hosts) {
    auto& rs = ranks_of[h];
    std::stable_sort(rs.begin(), rs.end(), [&](int a, int b) { return p.ranks[a].local_rank < p.ranks[b].local_rank; });
    for (std::size_t i = 0; i < rs.size(); ++i) {
      const RankHost& rh = p.ranks[rs[i]];
      if (i > 0 && p.ranks[rs[i - 1]].local_rank == rh.local_rank)
        throw Error("network profile: ranks " + std::to_string(rs[i - 1]) + " and " + std::to_string(rs[i]) +
                    " both say they are local rank " + std::to_string(rh.local_rank) + " on host '" + rh.host +
                    "' (set LOCAL_RANK per rank)");
      cluster::Device d{deviceName(rs[i]), "cpu", 1.0,
                        rh.physical_memory_bytes / static_cast<int64_t>(rs.size())};
      if (rh.host_link_bandwidth > 0) {
        d.kind = "gpu";
        d.memory_bytes = rh.gpu_memory_bytes;
        d.host_link_bandwidth = rh.host_link_bandwidth;
        through_host = true;
      } else {
        d.threads = rh.threads;
      }
      devices.push_back(d);
    }
  }

  // The pairs split into rank 0's same-host ones and the cross-host ones, these also by
  // their pair of hosts.
  struct Tier {
    std::vector<double> bandwidth, latency, overhead, copy_bandwidth;
    cluster::Level level(const std::string& name, int group_size) const {
      return {name, group_size, median(bandwidth), median(latency), {median(overhead), median(copy_bandwidth)}};
    }
  } same, cross;
  std::map<std::pair<std::string, std::string>, Tier> between;  // by their two hosts, in host order
  const auto hostIndex = [&](const std::string& h) { return std::find(hosts.begin(), hosts.end(), h) - hosts.begin(); };
  const double largest = static_cast<double>(p.sizes.back());
  for (const PairMeasurement& m : p.pairs) {
    std::string a = hostOfRank(m.from), b = hostOfRank(m.peer);
    if (hostIndex(a) > hostIndex(b)) std::swap(a, b);
    std::vector<Tier*> tiers;
    if (a == b) {
      if (m.from == 0) tiers.push_back(&same);
    } else {
      tiers.push_back(&between[{a, b}]);
      tiers.push_back(&cross);
    }
    for (Tier* tier : tiers) {
      tier->bandwidth.push_back(m.bandwidth.back());  // the largest message
      tier->latency.push_back(m.latency_seconds);
      tier->overhead.push_back(m.overhead_seconds);
      // The host's copy rate from the largest message's CPU time; none measured: no copy.
      const double copy_cpu = m.message_cpu_seconds.empty() ? 0 : m.message_cpu_seconds.back();
      tier->copy_bandwidth.push_back(copy_cpu > 0 ? largest / copy_cpu : std::numeric_limits<double>::infinity());
    }
  }
  std::vector<cluster::Level> levels;
  if (hosts.size() == 1) {
    levels.push_back(same.level("host", world));
  } else {
    const std::size_t k = ranks_of[hosts[0]].size();
    bool even = k >= 2;
    for (const auto& h : hosts) even = even && ranks_of[h].size() == k;
    if (even) levels.push_back(same.level("host", static_cast<int>(k)));
    levels.push_back(cross.level("network", world));
  }
  // Hosts whose link is off the network's by more than kLinkSpread: links of their own.
  std::vector<cluster::Link> links;
  for (const auto& [hosts_pair, tier] : between) {
    const cluster::Level own = tier.level("", 0);
    const double spread = own.bandwidth / levels.back().bandwidth;
    if (spread < cluster::kLinkSpread && spread > 1 / cluster::kLinkSpread) continue;
    for (int a : ranks_of[hosts_pair.first])
      for (int b : ranks_of[hosts_pair.second])
        links.emplace_back(deviceName(a), deviceName(b), own.bandwidth, own.latency, own.host);
  }
  // The all-reduce ran over every rank, so its ring crossed the slowest route: its time
  // less the ring's 2(n-1) latencies, for the 2(n-1)/n of the bytes each rank sends
  // (sim::ringAllreduceSeconds), is that route's all-reduce rate. Every route then moves
  // all-reduce traffic at the same share of its bandwidth. Where the latencies take the
  // time, it says nothing about a rate, and routes keep their bandwidths. The same
  // traffic over rank 0's CPU time is the rate its CPU moved it at (the ranks of a
  // thread-per-rank test share one process clock, and so overstate it).
  cluster::Level& top = levels.back();
  double slowest = top.bandwidth;
  for (const cluster::Link& l : links) slowest = std::min(slowest, l.bandwidth);
  const double steps = 2.0 * (world - 1);
  // The small all-reduce's fixed cost is what its bytes at the ring's rate leave: over a
  // slow link (100 Mb/s) those alone take 5 ms, which is no cost per step.
  const double small_bytes = steps / world * static_cast<double>(kFixedCostBytes) / slowest;
  if (p.small_allreduce_seconds > 0)
    top.allreduce_latency = std::max(p.small_allreduce_seconds - small_bytes, steps * top.latency) / steps;
  const double step_latency = top.allreduce_latency >= 0 ? top.allreduce_latency : top.latency;
  const double moving = p.allreduce_seconds - steps * step_latency;
  const double reduced = static_cast<double>(p.allreduce_bytes > 0 ? p.allreduce_bytes : p.sizes.back());
  const double share =
      p.allreduce_seconds > 0 && moving > 0.05 * p.allreduce_seconds ? steps / world * reduced / moving / slowest : 0;
  if (share > 0) top.allreduce_bandwidth = share * top.bandwidth;
  if (p.allreduce_cpu_seconds > 0) top.allreduce_host_bandwidth = steps / world * reduced / p.allreduce_cpu_seconds;
  for (auto& l : levels) l.through_host = through_host;
  for (cluster::Link& l : links) {
    if (share > 0) l.allreduce_bandwidth = share * l.bandwidth;
    l.allreduce_host_bandwidth = top.allreduce_host_bandwidth;
    l.allreduce_latency = top.allreduce_latency;
    l.through_host = through_host;
  }
  return cluster::ClusterSpec(std::move(devices), std::move(levels), std::move(links), "measured network");
}

}  // namespace pipetrain::profiler
