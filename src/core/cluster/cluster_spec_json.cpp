// ClusterSpec <-> JSON ("pipetrain.cluster", version 1; docs/formats.md#cluster-spec).
#include "pipetrain/cluster/cluster_spec.h"
#include "pipetrain/util/limits.h"

#include <cmath>
#include <limits>

namespace pipetrain::cluster {
namespace {

constexpr const char* kFormat = "pipetrain.cluster";
constexpr int kVersion = 1;

// JSON has no infinity, so infinite bandwidth (free communication) is the string "inf".
double readBandwidth(const json_io::JsonCursor& c) {
  if (c.node().is_string()) {
    if (c.asString() != "inf") c.fail("expected bytes per second or \"inf\", found \"" + c.asString() + "\"");
    return std::numeric_limits<double>::infinity();
  }
  return c.asNumberIn(limits::kMinRate, limits::kMaxRate);
}

json_io::Json writeBandwidth(double b) { return std::isinf(b) ? json_io::Json("inf") : json_io::Json(b); }

// A level's or link's optional "host_overhead" and "host_copy_bandwidth".
HostCost readHostCost(const json_io::JsonCursor& c) {
  HostCost h;
  if (c.has("host_overhead")) h.overhead = c.field("host_overhead").asSeconds();
  if (c.has("host_copy_bandwidth")) h.copy_bandwidth = readBandwidth(c.field("host_copy_bandwidth"));
  return h;
}

// Written only where messages cost the host something, so older files read back as written.
void writeHostCost(const HostCost& h, json_io::Json& j) {
  if (h.free()) return;
  j["host_overhead"] = h.overhead;
  j["host_copy_bandwidth"] = writeBandwidth(h.copy_bandwidth);
}

// A level's or link's optional "allreduce_bandwidth" and "allreduce_host_bandwidth",
// written only where given.
// ... and "through_host", written only where true.
template <typename LevelOrLink>
void readAllreduceRates(const json_io::JsonCursor& c, LevelOrLink& l) {
  if (c.has("allreduce_bandwidth")) l.allreduce_bandwidth = readBandwidth(c.field("allreduce_bandwidth"));
  if (c.has("allreduce_host_bandwidth")) l.allreduce_host_bandwidth = readBandwidth(c.field("allreduce_host_bandwidth"));
  if (c.has("allreduce_latency")) l.allreduce_latency = c.field("allreduce_latency").asSeconds();
  l.through_host = c.boolOr("through_host", false);
}

template <typename LevelOrLink>
void writeAllreduceRates(const LevelOrLink& l, json_io::Json& j) {
  if (l.allreduce_bandwidth > 0) j["allreduce_bandwidth"] = writeBandwidth(l.allreduce_bandwidth);
  if (!std::isinf(l.allreduce_host_bandwidth)) j["allreduce_host_bandwidth"] = writeBandwidth(l.allreduce_host_bandwidth);
  if (l.allreduce_latency >= 0) j["allreduce_latency"] = l.allreduce_latency;
  if (l.through_host) j["through_host"] = true;
}

// One entry of "devices": a device, or {"count": N, "name_prefix": P, ...} standing for
// devices P0..P{N-1} with the same kind, speed and memory.
void readDevices(const json_io::JsonCursor& c, std::vector<Device>& out) {
  const bool shorthand = c.has("count");
  if (shorthand)
    c.allowOnly({"count", "name_prefix", "kind", "speed", "memory_bytes", "host_link_bandwidth", "threads",
                 "action_overhead", "action_overhead_share", "compute_jitter"});
  else
    c.allowOnly({"name", "kind", "speed", "memory_bytes", "host_link_bandwidth", "threads", "action_overhead",
                 "action_overhead_share", "compute_jitter"});
  Device d;
  d.kind = c.stringOr("kind", "cpu");
  d.speed = c.has("speed") ? c.field("speed").asNumberIn(limits::kMinRate, limits::kMaxRate) : 1.0;
  d.memory_bytes = c.field("memory_bytes").asBytes();
  if (c.has("host_link_bandwidth")) d.host_link_bandwidth = readBandwidth(c.field("host_link_bandwidth"));
  if (c.has("threads")) d.threads = static_cast<int>(c.field("threads").asIntIn(1, limits::kMaxThreads));
  if (c.has("action_overhead")) d.action_overhead = c.field("action_overhead").asSeconds();
  if (c.has("action_overhead_share")) d.action_overhead_share = c.field("action_overhead_share").asNumberIn(0, 1);
  if (c.has("compute_jitter")) d.compute_jitter = c.field("compute_jitter").asNumberIn(0, 1);
  if (!shorthand) {
    d.name = c.field("name").asString();
    out.push_back(d);
    return;
  }
  const int64_t count = c.field("count").asIntIn(1, limits::kMaxDevices);
  const std::string prefix = c.field("name_prefix").asString();
  for (int64_t i = 0; i < count; ++i) {
    d.name = prefix + std::to_string(i);
    out.push_back(d);
  }
}

Level readLevel(const json_io::JsonCursor& c) {
  c.allowOnly({"name", "group_size", "bandwidth", "latency", "host_overhead", "host_copy_bandwidth",
               "allreduce_bandwidth", "allreduce_host_bandwidth", "allreduce_latency", "through_host"});
  Level l;
  l.name = c.field("name").asString();
  l.group_size = static_cast<int>(c.field("group_size").asIntIn(1, limits::kMaxDevices));
  l.bandwidth = readBandwidth(c.field("bandwidth"));
  l.latency = c.field("latency").asSeconds();
  l.host = readHostCost(c);
  readAllreduceRates(c, l);
  return l;
}

Link readLink(const json_io::JsonCursor& c) {
  c.allowOnly({"a", "b", "bandwidth", "latency", "host_overhead", "host_copy_bandwidth", "allreduce_bandwidth",
               "allreduce_host_bandwidth", "allreduce_latency", "through_host"});
  Link k{c.field("a").asString(), c.field("b").asString(), readBandwidth(c.field("bandwidth")),
         c.field("latency").asSeconds(), readHostCost(c)};
  readAllreduceRates(c, k);
  return k;
}

SharedCores readSharedCores(const json_io::JsonCursor& c) {
  c.allowOnly({"devices", "cores"});
  SharedCores group;
  for (const auto& item : c.field("devices").asArray()) group.devices.push_back(item.asString());
  group.cores = static_cast<int>(c.field("cores").asIntIn(1, limits::kMaxDevices));
  return group;
}

}  // namespace

ClusterSpec ClusterSpec::fromJson(const json_io::Json& j, const std::string& origin) {
  const json_io::JsonCursor root(j, origin);
  json_io::checkHeader(root, kFormat, kVersion);
  root.allowOnly({"format", "version", "devices", "levels", "links", "shared_cores"});
  std::vector<Device> devices;
  for (const auto& item : root.field("devices").asArray()) readDevices(item, devices);
  std::vector<Level> levels;
  if (root.has("levels"))
    for (const auto& item : root.field("levels").asArray()) levels.push_back(readLevel(item));
  std::vector<Link> links;
  if (root.has("links"))
    for (const auto& item : root.field("links").asArray()) links.push_back(readLink(item));
  std::vector<SharedCores> shared_cores;
  if (root.has("shared_cores"))
    for (const auto& item : root.field("shared_cores").asArray()) shared_cores.push_back(readSharedCores(item));
  return ClusterSpec(std::move(devices), std::move(levels), std::move(links), origin, std::move(shared_cores));
}

ClusterSpec ClusterSpec::load(const std::string& path) { return fromJson(json_io::readFile(path), path); }

json_io::Json ClusterSpec::toJson() const {
  json_io::Json j = json_io::header(kFormat, kVersion);
  json_io::Json devices = json_io::Json::array(), levels = json_io::Json::array(), links = json_io::Json::array();
  for (const Device& d : devices_) {
    json_io::Json device = {{"name", d.name}, {"kind", d.kind}, {"speed", d.speed}, {"memory_bytes", d.memory_bytes}};
    if (!std::isinf(d.host_link_bandwidth)) device["host_link_bandwidth"] = writeBandwidth(d.host_link_bandwidth);
    if (d.threads > 0) device["threads"] = d.threads;
    if (d.action_overhead > 0) device["action_overhead"] = d.action_overhead;
    if (d.action_overhead_share > 0) device["action_overhead_share"] = d.action_overhead_share;
    if (d.compute_jitter > 0) device["compute_jitter"] = d.compute_jitter;
    devices.push_back(std::move(device));
  }
  for (const Level& l : levels_) {
    json_io::Json level = {{"name", l.name},
                           {"group_size", l.group_size},
                           {"bandwidth", writeBandwidth(l.bandwidth)},
                           {"latency", l.latency}};
    writeHostCost(l.host, level);
    writeAllreduceRates(l, level);
    levels.push_back(std::move(level));
  }
  for (const Link& k : links_) {
    json_io::Json link = {{"a", k.a}, {"b", k.b}, {"bandwidth", writeBandwidth(k.bandwidth)}, {"latency", k.latency}};
    writeHostCost(k.host, link);
    writeAllreduceRates(k, link);
    links.push_back(std::move(link));
  }
  j["devices"] = std::move(devices);
  j["levels"] = std::move(levels);
  j["links"] = std::move(links);
  if (!shared_cores_.empty()) {
    json_io::Json groups = json_io::Json::array();
    for (const SharedCores& g : shared_cores_) groups.push_back({{"devices", g.devices}, {"cores", g.cores}});
    j["shared_cores"] = std::move(groups);
  }
  return j;
}

}  // namespace pipetrain::cluster
