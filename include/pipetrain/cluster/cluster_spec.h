// ClusterSpec: the devices a job may use and the network between them.
//
// The network is a hierarchy of levels, innermost first: level 0 might be "8 devices
// per node over NVLink", level 1 "4 nodes per rack over InfiniBand". Two devices talk
// over the innermost level whose group contains both. Explicit links override the
// hierarchy for a pair of devices (useful for rings and irregular FPGA boards).
//
// Contention: a transfer occupies ports, and transfers sharing a port queue. Over
// level 0 each device has its own port (per direction); over level L >= 1 all devices
// of one level-(L-1) group share one port (per direction), the way GPUs of a node share
// the node's NIC. An explicit link is one port per direction.
//
// Host cost: a message can also cost the host's CPU at both ends (the process that sends
// it and the one that receives it), time those processes cannot compute in: a fixed
// overhead per message and, where the host copies the bytes itself (TCP, loopback), a
// copy rate. `pipetrain profile-network` measures both (Gloo over loopback on a 2-core
// VM: docs/formats.md, "Cluster spec"). Left out, messages cost no host time (a NIC or
// GPU moving the bytes on its own).
//
// All-reduce rate: a level or link may price a ring all-reduce's traffic at a rate of
// its own. Gloo on CPU hosts sums the gradients on the cores that also train, so its
// all-reduce over loopback moved ring traffic several times slower than single messages;
// priced at one rate, either the all-reduce or the activations were far off
// (docs/formats.md, "Cluster spec").
// Left out, the all-reduce moves at the link's bandwidth. And where the hosts' CPUs
// move and sum that traffic themselves, `allreduce_host_bandwidth` is how much of it a
// rank's CPU gets through per second: that time is the rank's core's, which no backward
// pass can overlap (on this 2-core VM the all-reduce's Gloo threads stretched a data-
// parallel backward pass: docs/formats.md, "Cluster spec"). Left out, the all-reduce
// costs the CPUs nothing. And `allreduce_latency` prices each step of the ring beyond its
// bytes where that is not a message's latency: Gloo over loopback took many times a
// message's latency for a small all-reduce of two ranks (docs/profiling.md, "The
// all-reduce") because each step waits for both ends' I/O threads to get a core. Left
// out, a step costs the route's latency.
//
// Through host memory: GPUs whose messages go through the hosts' memory (Gloo, or ranks
// that share a GPU) copy each message to the host at the sender and onto the device at
// the receiver, on the stream that computes. A level or link with `through_host` prices
// that copy at each end: bytes / the device's `host_link_bandwidth` (its PCIe link),
// time the device cannot compute in. Left out, messages go device to device (NCCL) and
// the link's bandwidth alone prices them.
//
// Shared cores: devices that are processes on one host's CPU cores (more ranks than
// cores) compete for them. A plan's devices in one group go onto its cores round-robin,
// in rank order (sharedCoreOf), and a core runs the devices on it that compute in turn,
// each at an equal share of its speed. `train` pins its local ranks to the cores by the
// same rule when they outnumber the cores: left to the kernel, which moves them about,
// 3 ranks on 2 cores ran slower than pinned and further from what this model predicts
// (docs/predictions.md, "The runs people start").
// JSON form: docs/formats.md#cluster-spec ("pipetrain.cluster", version 1).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pipetrain/util/json_io.h"

namespace pipetrain::cluster {

struct Device {
  std::string name;
  std::string kind = "cpu";    // cpu, gpu, fpga, ...
  double speed = 1.0;          // relative compute speed: time = profiled time / speed
  int64_t memory_bytes = 0;
  // Bytes/s of a copy between the device and its host's memory (see above); infinity:
  // the device computes in host memory (a CPU) or its copies are not priced.
  double host_link_bandwidth = std::numeric_limits<double>::infinity();
  // The threads a CPU device computes on (a rank's cores), where the cluster says: a
  // profile timed on other threads is brought to them (planner::fitProfileToCluster).
  // 0 = not said: priced as profiled.
  int threads = 0;
  // Seconds the runtime spends on a rank of this device around each action of its
  // Program, outside the action and beyond the messages' host costs: posting receives,
  // retiring weight versions, timing, reporting (docs/predictions.md, "The runtime's own
  // time"). 0 = not priced.
  double action_overhead = 0;
  // The part of that time that grows with the action: this share of the compute action
  // (F, B, I, W, STEP) just ended, on top of action_overhead. On this machine's CPU
  // ranks about 8 us plus 0.25% of the action (docs/predictions.md, "The runtime's own
  // time, learned"). 0 = none; at most 1.
  double action_overhead_share = 0;
  // How much a rank's compute between two meetings of its stage's replicas wanders from
  // one mini-batch to the next: the standard deviation, as a share of that compute.
  // Replicas that meet for their all-reduce wait for the last to arrive, so a meeting of
  // n costs the expected maximum of n such arrivals beyond their mean
  // (sim::expectedMaxOfNormals); on this machine's CPU ranks about 4% (docs/
  // predictions.md, "Replicas wait for the last to arrive"). 0 = steady; at most 1.
  double compute_jitter = 0;
};

// What a message costs the CPU of each of its two ends (see above).
struct HostCost {
  double overhead = 0;         // seconds per message
  double copy_bandwidth = std::numeric_limits<double>::infinity();  // bytes/s; inf: no copy
  double seconds(double bytes) const { return overhead + bytes / copy_bandwidth; }
  bool free() const { return overhead == 0 && copy_bandwidth == std::numeric_limits<double>::infinity(); }
};

struct Level {
  Level() = default;
  Level(std::string name, int group_size, double bandwidth, double latency, HostCost host = {})
      : name(std::move(name)), group_size(group_size), bandwidth(bandwidth), latency(latency), host(host) {}

  std::string name;            // "node", "rack", ...
  int group_size = 1;          // devices per group at this level (cumulative)
  double bandwidth = 0;        // bytes per second, per direction
  double latency = 0;          // seconds
  HostCost host;
  double allreduce_bandwidth = 0;  // a ring all-reduce's rate (see above); 0 = bandwidth
  // Its traffic through each rank's CPU (see above); infinity = none.
  double allreduce_host_bandwidth = std::numeric_limits<double>::infinity();
  // Seconds per step of a ring all-reduce beyond its bytes (see above); < 0 = latency.
  double allreduce_latency = -1;
  bool through_host = false;   // messages copied through host memory (see above)
};

struct Link {
  Link() = default;
  Link(std::string a, std::string b, double bandwidth, double latency, HostCost host = {})
      : a(std::move(a)), b(std::move(b)), bandwidth(bandwidth), latency(latency), host(host) {}

  std::string a, b;            // device names; the link is full duplex
  double bandwidth = 0;
  double latency = 0;
  HostCost host;
  double allreduce_bandwidth = 0;  // as Level's
  double allreduce_host_bandwidth = std::numeric_limits<double>::infinity();
  double allreduce_latency = -1;
  bool through_host = false;
};

// Devices that share `cores` cores (see above); a device is in at most one group.
struct SharedCores {
  std::vector<std::string> devices;
  int cores = 1;
};

// The core (0 .. cores-1) of the group's `position`-th device in rank order:
// round-robin. The simulator and `train`'s launcher place ranks by it.
inline int sharedCoreOf(int position, int cores) { return position % cores; }

// What one transfer between two devices uses.
struct Route {
  Route() = default;
  Route(double bandwidth, double latency, int send_port, int recv_port, HostCost host = {},
        double allreduce_bandwidth = 0, double allreduce_host_bandwidth = std::numeric_limits<double>::infinity())
      : bandwidth(bandwidth),
        latency(latency),
        send_port(send_port),
        recv_port(recv_port),
        host(host),
        allreduce_bandwidth(allreduce_bandwidth > 0 ? allreduce_bandwidth : bandwidth),
        allreduce_host_bandwidth(allreduce_host_bandwidth) {}

  double bandwidth = 0;        // bytes/s; infinity for a device talking to itself
  double latency = 0;
  int send_port = -1;          // contention resources; -1 = none (same device)
  int recv_port = -1;
  HostCost host;               // free for a device talking to itself
  double allreduce_bandwidth = 0;  // a ring all-reduce's traffic over this route, bytes/s
  double allreduce_host_bandwidth = std::numeric_limits<double>::infinity();  // ... and through each end's CPU
  double allreduce_latency = -1;  // as Level's
  bool through_host = false;   // copied through host memory at both ends (see above)
  // Seconds per step of a ring all-reduce over this route beyond its bytes.
  double allreduceLatency() const { return allreduce_latency >= 0 ? allreduce_latency : latency; }
};

// What one message of `bytes` over `route` costs the device at one of its ends, in time
// that device cannot compute in: the route's host cost, and where the route goes through
// host memory, the copy over the device's link to its host. The simulator, the planner's
// chain partition and the throughput bound all price a message's ends by it.
inline double messageEndSeconds(const Device& end, const Route& route, double bytes) {
  double seconds = route.host.free() ? 0 : route.host.seconds(bytes);
  if (route.through_host) seconds += bytes / end.host_link_bandwidth;
  return seconds;
}
// An all-reduce whose ring goes through host memory (any of its hops `through_host`)
// copies each replica's gradients to the host and back: seconds per byte of them on
// `replica`. The ring waits for its slowest replica, so the simulator and the chain DP
// both charge every replica the largest of these over the ring.
inline double allreduceCopySecondsPerByte(const Device& replica) { return 2 / replica.host_link_bandwidth; }
// Whether messageEndSeconds is 0 for every message over `route`.
inline bool endsFree(const Route& route) { return route.host.free() && !route.through_host; }

class ClusterSpec {
 public:
  ClusterSpec() = default;
  // Validates (unique device names, positive speeds and bandwidths, group sizes that
  // nest, links naming known devices) and throws Error naming `origin` otherwise.
  ClusterSpec(std::vector<Device> devices, std::vector<Level> levels, std::vector<Link> links,
              std::string origin = "cluster", std::vector<SharedCores> shared_cores = {});

  static ClusterSpec fromJson(const json_io::Json& j, const std::string& origin);
  static ClusterSpec load(const std::string& path);
  json_io::Json toJson() const;

  // `n` identical devices joined by one level with the given bandwidth and latency
  // (infinite bandwidth and zero latency = communication is free).
  static ClusterSpec uniform(int n, int64_t memory_bytes, double bandwidth, double latency);

  int size() const { return static_cast<int>(devices_.size()); }
  const Device& device(int index) const { return devices_[index]; }
  const std::vector<Device>& devices() const { return devices_; }
  const std::vector<Level>& levels() const { return levels_; }
  const std::vector<Link>& links() const { return links_; }
  const std::vector<SharedCores>& sharedCores() const { return shared_cores_; }
  // The index in sharedCores() of the group holding `device`, or -1.
  int sharedCoresOf(int device) const { return core_group_[device]; }
  int indexOf(const std::string& name) const;  // -1 when unknown

  Route route(int from, int to) const;
  // What joins two devices, as route() finds it, in words: "link a <-> b" for an
  // explicit link (the same both ways), else the name of the innermost level whose
  // group holds both.
  std::string routeName(int from, int to) const;
  int numPorts() const { return num_ports_; }

 private:
  void buildPorts();
  // The innermost level whose group holds both devices (the top level joins its groups).
  int levelOf(int from, int to) const;

  std::vector<Device> devices_;
  std::vector<Level> levels_;
  std::vector<Link> links_;
  std::vector<SharedCores> shared_cores_;
  std::vector<int> core_group_;  // per device
  std::unordered_map<std::string, int> index_;
  int num_ports_ = 0;
  std::vector<int> level_port_base_;             // first port of each level
  std::unordered_map<int64_t, int> link_ports_;  // from * size() + to -> that direction's port
};

}  // namespace pipetrain::cluster
