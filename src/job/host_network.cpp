#include "pipetrain/job/host_network.h"

#include <cstdio>
#include <filesystem>
#include <map>

#include "pipetrain/plan/plan_program.h"
#include "pipetrain/torch/device.h"
#include "pipetrain/torch/profiler.h"
#include "pipetrain/util/error.h"

namespace pipetrain::job {
namespace {

using json_io::Json;

std::string networkDir() { return (std::filesystem::path(graph::ProfileCache::defaultDir()) / "network").string(); }

std::string clusterPath(const graph::ProfileKey& key) {
  return (std::filesystem::path(networkDir()) / (key.digest() + ".json")).string();
}

std::string keyPath(const graph::ProfileKey& key) {
  return (std::filesystem::path(networkDir()) / (key.digest() + ".key.json")).string();
}

// NOTE(job network sizes): profile-network's own sizes (1-16 MiB, 10 repeats) take
// minutes over 100 Mb/s. A job waits for this once per set of hosts, so it measures
// messages of up to 2 MiB, 5 times: a 2 MiB message takes 0.17 s at 100 Mb/s and 1.7 ms
// at 10 Gb/s, long enough beside a latency of 0.05-1 ms to tell the rate.
profiler::NetworkOptions jobNetworkOptions() {
  profiler::NetworkOptions o;
  o.sizes = {int64_t{256} << 10, int64_t{2} << 20};
  o.repeats = 5;
  return o;
}

std::string rate(double bytes_per_second) {
  char buf[48];
  if (bytes_per_second >= 1e9 / 8 * 10)
    std::snprintf(buf, sizeof buf, "%.2f GB/s", bytes_per_second / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.1f MB/s (%.0f Mb/s)", bytes_per_second / 1e6, bytes_per_second * 8 / 1e6);
  return buf;
}

}  // namespace

Json RankPlace::toJson() const {
  return {{"identity", identity}, {"address", address}, {"local_rank", local_rank},
          {"threads", threads},    {"device", device}};
}

RankPlace RankPlace::fromJson(const Json& j, const std::string& origin) {
  try {
    RankPlace p;
    p.identity = j.at("identity").get<std::string>();
    p.address = j.at("address").get<std::string>();
    p.local_rank = j.at("local_rank").get<int>();
    p.threads = j.at("threads").get<int>();
    p.device = j.at("device").get<std::string>();
    return p;
  } catch (const std::exception& e) {
    throw Error(origin + ": not a rank's place (" + e.what() + ")");
  }
}

RankPlace thisRankPlace(const runtime::Rendezvous& rendezvous, int local_rank, const std::string& device, int threads) {
  RankPlace p;
  p.identity = runtime::hostIdentity();
  p.address = runtime::localAddressToward(rendezvous.master_addr, rendezvous.master_port);
  p.local_rank = local_rank;
  p.threads = threads;
  p.device = device;
  return p;
}

bool oneHost(const std::vector<RankPlace>& ranks) {
  for (const RankPlace& r : ranks)
    if (r.identity != ranks.front().identity) return false;
  return true;
}

void checkNumberedHostByHost(const std::vector<RankPlace>& ranks) {
  std::map<std::string, std::size_t> last_on;  // host -> its latest rank so far
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const auto seen = last_on.find(ranks[r].identity);
    if (seen != last_on.end() && seen->second != r - 1)
      throw Error("ranks " + std::to_string(seen->second) + " and " + std::to_string(r) +
                  " share a host, and other hosts' ranks come between them: number the ranks host by host (all of "
                  "one host's before the next host's), as torchrun does");
    if (seen != last_on.end() && ranks[r].local_rank <= ranks[r - 1].local_rank)
      throw Error("ranks " + std::to_string(r - 1) + " and " + std::to_string(r) + " share a host, and rank " +
                  std::to_string(r) + " has the lower LOCAL_RANK: number a host's ranks in LOCAL_RANK order, as "
                  "torchrun does");
    last_on[ranks[r].identity] = r;
  }
}

graph::ProfileKey networkKey(const std::vector<RankPlace>& ranks, const std::string& wire) {
  graph::ProfileKey key;
  key.add("format", "pipetrain.network-key/1");
  key.add("wire", wire);
  for (std::size_t r = 0; r < ranks.size(); ++r) key.add("rank " + std::to_string(r), ranks[r].toJson().dump());
  return key;
}

std::optional<CachedNetwork> findNetwork(const graph::ProfileKey& key) {
  std::error_code ec;
  if (!std::filesystem::exists(keyPath(key), ec)) return std::nullopt;
  try {
    const Json k = json_io::readFile(keyPath(key));
    if (!k.is_object() || k.value("key", Json()) != key.toJson()) return std::nullopt;
    return CachedNetwork{cluster::ClusterSpec::load(clusterPath(key)), clusterPath(key)};
  } catch (const Error&) {
    return std::nullopt;  // a damaged entry is measured again, and replaced
  }
}

std::string storeNetwork(const graph::ProfileKey& key, const cluster::ClusterSpec& cluster) {
  std::error_code ec;
  std::filesystem::create_directories(networkDir(), ec);
  if (ec) return "";
  try {
    // The key last: an entry whose cluster was not written whole has no key yet.
    std::filesystem::remove(keyPath(key), ec);
    json_io::writeFile(clusterPath(key), cluster.toJson());
    json_io::writeFile(keyPath(key),
                       {{"format", "pipetrain.network-cache-key"}, {"version", 1}, {"key", key.toJson()}});
    return clusterPath(key);
  } catch (const Error&) {
    return "";
  }
}

std::optional<cluster::ClusterSpec> measureNetwork(const runtime::Rendezvous& rendezvous, const std::string& wire,
                                                   const std::string& device_spec) {
  // A group of its own, under keys of its own: the job's transport meets under the
  // rendezvous's prefix once this one is gone.
  runtime::Rendezvous rv = rendezvous;
  rv.store_prefix += "/pipetrain-network";
  const auto transport = runtime::makeGlooTransport(rv);
  const int local_rank = runtime::localRank(rv.rank);
  const torch::Device device = runtime::rankDevice(device_spec, local_rank);
  // As profile-network: the sums of ranks on GPUs go over Gloo, through host memory.
  const std::string sums_wire = wire == "auto" && !device.is_cpu() ? "gloo" : wire;
  const std::unique_ptr<runtime::DataChannel> sums = runtime::openDataChannel(sums_wire, rv, device, *transport);
  const profiler::NetworkOptions options = jobNetworkOptions();
  const profiler::NetworkProfile p = profiler::profileNetwork(
      *transport, profiler::thisHost(local_rank, rv, device, options.sizes.back()), options, sums.get());
  if (rv.rank != 0) return std::nullopt;
  return profiler::clusterFromNetwork(p);
}

std::vector<int> planRanksOfJobRanks(const plan::Plan& plan, const cluster::ClusterSpec& hosts) {
  const std::vector<std::string> devices = plan::rankDeviceNames(plan);
  if (static_cast<int>(devices.size()) != hosts.size())
    throw Error("the plan runs on " + std::to_string(devices.size()) + " devices, and the job's hosts have " +
                std::to_string(hosts.size()));
  std::vector<int> plan_rank(devices.size(), -1);
  for (std::size_t r = 0; r < devices.size(); ++r) {
    const int job_rank = hosts.indexOf(devices[r]);
    if (job_rank < 0) throw Error("the plan names device '" + devices[r] + "', which none of the job's hosts has");
    plan_rank[job_rank] = static_cast<int>(r);
  }
  return plan_rank;
}

std::vector<std::string> describeNetwork(const cluster::ClusterSpec& cluster) {
  std::vector<std::string> lines;
  const auto figures = [](double bandwidth, double latency, double allreduce_bandwidth) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s, latency %.0f us", rate(bandwidth).c_str(), latency * 1e6);
    std::string text = buf;
    if (allreduce_bandwidth > 0) text += ", all-reduce traffic at " + rate(allreduce_bandwidth);
    return text;
  };
  for (const cluster::Level& l : cluster.levels())
    lines.push_back("level '" + l.name + "' (groups of " + std::to_string(l.group_size) +
                    "): " + figures(l.bandwidth, l.latency, l.allreduce_bandwidth));
  for (const cluster::Link& l : cluster.links())
    lines.push_back("link " + l.a + " <-> " + l.b + ", off the network's rate: " +
                    figures(l.bandwidth, l.latency, l.allreduce_bandwidth));
  return lines;
}

}  // namespace pipetrain::job
