// ClusterSpec construction, routes and contention ports.
#include "pipetrain/cluster/cluster_spec.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <set>
#include <utility>

#include "pipetrain/util/error.h"
#include "pipetrain/util/limits.h"

namespace pipetrain::cluster {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Bandwidth may be infinite (free communication) but never zero, negative or NaN.
bool validBandwidth(double b) { return b > 0; }
bool validLatency(double l) { return l >= 0 && l < kInfinity; }

void checkHostCost(const HostCost& h, const std::string& where) {
  if (!validLatency(h.overhead)) throw Error(where + ": host_overhead must be non-negative and finite seconds");
  if (!validBandwidth(h.copy_bandwidth)) throw Error(where + ": host_copy_bandwidth must be positive (or \"inf\")");
}

// allreduce_bandwidth 0 = left out (the link's bandwidth).
void checkAllreduceRates(double bandwidth, double host_bandwidth, const std::string& where) {
  if (!(bandwidth == 0 || validBandwidth(bandwidth)))
    throw Error(where + ": allreduce_bandwidth must be positive (or \"inf\")");
  if (!validBandwidth(host_bandwidth)) throw Error(where + ": allreduce_host_bandwidth must be positive (or \"inf\")");
}

// Units that own ports at level `level`: single devices at level 0, the groups of the
// level below otherwise. Whatever shares a unit shares its ports.
int unitOf(const std::vector<Level>& levels, int level, int device) {
  return level == 0 ? device : device / levels[level - 1].group_size;
}

}  // namespace

ClusterSpec::ClusterSpec(std::vector<Device> devices, std::vector<Level> levels, std::vector<Link> links,
                         std::string origin, std::vector<SharedCores> shared_cores)
    : devices_(std::move(devices)),
      levels_(std::move(levels)),
      links_(std::move(links)),
      shared_cores_(std::move(shared_cores)) {
  if (devices_.empty()) throw Error(origin + ": the cluster has no devices");
  for (std::size_t i = 0; i < devices_.size(); ++i) {
    const Device& d = devices_[i];
    const std::string where = origin + ": device '" + d.name + "'";
    if (d.name.empty()) throw Error(origin + ": devices[" + std::to_string(i) + "] has an empty name");
    if (!index_.emplace(d.name, static_cast<int>(i)).second) throw Error(where + " is defined twice");
    if (!(d.speed > 0 && d.speed < kInfinity)) throw Error(where + ": speed must be positive and finite");
    if (d.memory_bytes < 0) throw Error(where + ": memory_bytes must not be negative");
    if (!(d.host_link_bandwidth > 0)) throw Error(where + ": host_link_bandwidth must be positive");
    if (!(d.action_overhead >= 0 && d.action_overhead <= limits::kMaxSeconds))
      throw Error(where + ": action_overhead must be non-negative and at most " +
                  std::to_string(static_cast<int64_t>(limits::kMaxSeconds)) + " seconds");
    if (!(d.action_overhead_share >= 0 && d.action_overhead_share <= 1))
      throw Error(where + ": action_overhead_share must lie between 0 and 1 (a share of the action)");
    if (!(d.compute_jitter >= 0 && d.compute_jitter <= 1))
      throw Error(where + ": compute_jitter must lie between 0 and 1 (a share of the compute)");
  }
  for (std::size_t i = 0; i < levels_.size(); ++i) {
    const Level& l = levels_[i];
    const std::string where = origin + ": level '" + l.name + "'";
    if (l.group_size < 1) throw Error(where + ": group_size must be at least 1");
    if (i > 0) {
      const Level& inner = levels_[i - 1];
      // Groups must nest exactly, or "the group containing both devices" is ambiguous.
      if (l.group_size <= inner.group_size || l.group_size % inner.group_size != 0)
        throw Error(where + ": group_size " + std::to_string(l.group_size) +
                    " must be a larger multiple of the inner level '" + inner.name + "' group_size " +
                    std::to_string(inner.group_size) + " (levels go innermost first)");
    }
    if (!validBandwidth(l.bandwidth)) throw Error(where + ": bandwidth must be positive (or \"inf\")");
    if (!validLatency(l.latency)) throw Error(where + ": latency must be non-negative and finite");
    if (l.allreduce_latency >= 0 && !validLatency(l.allreduce_latency))
      throw Error(where + ": allreduce_latency must be non-negative and finite");
    checkHostCost(l.host, where);
    checkAllreduceRates(l.allreduce_bandwidth, l.allreduce_host_bandwidth, where);
  }
  std::set<std::pair<int, int>> pairs;
  for (const Link& k : links_) {
    const std::string where = origin + ": link '" + k.a + "' - '" + k.b + "'";
    const int a = indexOf(k.a), b = indexOf(k.b);
    if (a < 0) throw Error(where + ": device '" + k.a + "' is not in the cluster");
    if (b < 0) throw Error(where + ": device '" + k.b + "' is not in the cluster");
    if (a == b) throw Error(where + ": a link needs two different devices");
    if (!pairs.emplace(std::min(a, b), std::max(a, b)).second) throw Error(where + " is given twice");
    if (!validBandwidth(k.bandwidth)) throw Error(where + ": bandwidth must be positive (or \"inf\")");
    if (!validLatency(k.latency)) throw Error(where + ": latency must be non-negative and finite");
    if (k.allreduce_latency >= 0 && !validLatency(k.allreduce_latency))
      throw Error(where + ": allreduce_latency must be non-negative and finite");
    checkHostCost(k.host, where);
    checkAllreduceRates(k.allreduce_bandwidth, k.allreduce_host_bandwidth, where);
  }
  core_group_.assign(devices_.size(), -1);
  for (std::size_t g = 0; g < shared_cores_.size(); ++g) {
    const SharedCores& group = shared_cores_[g];
    const std::string where = origin + ": shared_cores[" + std::to_string(g) + "]";
    if (group.devices.empty()) throw Error(where + " names no devices");
    if (group.cores < 1) throw Error(where + ": cores must be at least 1 (found " + std::to_string(group.cores) + ")");
    for (const std::string& name : group.devices) {
      const int d = indexOf(name);
      if (d < 0) throw Error(where + ": device '" + name + "' is not in the cluster");
      if (core_group_[d] >= 0)
        throw Error(where + ": device '" + name + "' already shares the cores of shared_cores[" +
                    std::to_string(core_group_[d]) + "]");
      core_group_[d] = static_cast<int>(g);
    }
  }
  buildPorts();
}

ClusterSpec ClusterSpec::uniform(int n, int64_t memory_bytes, double bandwidth, double latency) {
  if (n < 1) throw Error("uniform cluster: needs at least one device (found " + std::to_string(n) + ")");
  std::vector<Device> devices;
  for (int i = 0; i < n; ++i) devices.push_back({"dev" + std::to_string(i), "cpu", 1.0, memory_bytes});
  return ClusterSpec(std::move(devices), {{"network", n, bandwidth, latency}}, {}, "uniform cluster");
}

int ClusterSpec::indexOf(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : it->second;
}

// Port layout (dense, built once): for each level, an out and an in port per unit of
// that level (see unitOf), then two ports per link (a->b, then b->a). route() only
// does arithmetic and one hash lookup, since the simulator calls it per transfer.
void ClusterSpec::buildPorts() {
  num_ports_ = 0;
  level_port_base_.clear();
  for (std::size_t level = 0; level < levels_.size(); ++level) {
    level_port_base_.push_back(num_ports_);
    num_ports_ += 2 * (unitOf(levels_, static_cast<int>(level), size() - 1) + 1);
  }
  link_ports_.clear();
  for (const Link& k : links_) {
    const int64_t a = indexOf(k.a), b = indexOf(k.b);
    link_ports_[a * size() + b] = num_ports_++;
    link_ports_[b * size() + a] = num_ports_++;
  }
}

int ClusterSpec::levelOf(int from, int to) const {
  int level = static_cast<int>(levels_.size()) - 1;
  for (int l = 0; l < level; ++l)
    if (from / levels_[l].group_size == to / levels_[l].group_size) return l;
  return level;
}

std::string ClusterSpec::routeName(int from, int to) const {
  if (from == to) return "none (one device)";
  // A link is one name both ways: the traffic over it sums by its name.
  if (link_ports_.count(static_cast<int64_t>(from) * size() + to))
    return "link " + devices_[std::min(from, to)].name + " <-> " + devices_[std::max(from, to)].name;
  if (levels_.empty()) return "none";
  return levels_[levelOf(from, to)].name;
}

Route ClusterSpec::route(int from, int to) const {
  assert(from >= 0 && from < size() && to >= 0 && to < size());
  if (from == to) return Route{kInfinity, 0.0, -1, -1};

  // An explicit link wins over the hierarchy. Each direction is one resource, so it
  // is both the send and the receive port of the transfer.
  if (auto it = link_ports_.empty() ? link_ports_.end() : link_ports_.find(static_cast<int64_t>(from) * size() + to);
      it != link_ports_.end()) {
    const int first_link_port = num_ports_ - 2 * static_cast<int>(links_.size());
    const Link& k = links_[(it->second - first_link_port) / 2];
    Route r{k.bandwidth, k.latency, it->second, it->second, k.host, k.allreduce_bandwidth, k.allreduce_host_bandwidth};
    r.through_host = k.through_host;
    r.allreduce_latency = k.allreduce_latency;
    return r;
  }
  if (levels_.empty())
    throw Error("cluster: no route from device '" + devices_[from].name + "' to device '" + devices_[to].name +
                "': the cluster has no levels and no link between them (add a level or a link)");

  const int level = levelOf(from, to);
  const Level& lv = levels_[level];
  const int base = level_port_base_[level];
  Route r{lv.bandwidth, lv.latency, base + 2 * unitOf(levels_, level, from), base + 2 * unitOf(levels_, level, to) + 1,
          lv.host, lv.allreduce_bandwidth, lv.allreduce_host_bandwidth};
  r.through_host = lv.through_host;
  r.allreduce_latency = lv.allreduce_latency;
  return r;
}

}  // namespace pipetrain::cluster
