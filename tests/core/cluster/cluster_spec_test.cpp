// ClusterSpec: JSON form and shorthands, validation, routes through the hierarchy and
// explicit links, and the contention ports they occupy.
#include "pipetrain/cluster/cluster_spec.h"

#include <gtest/gtest.h>

#include "../expect_error.h"

#include <cmath>
#include <limits>
#include <set>

namespace pipetrain::cluster {
namespace {

using json_io::Json;

using testing::expectError;

// Two nodes of four GPUs: NVLink-like inside a node, a NIC per node between them.
Json twoNodesJson() {
  return Json::parse(R"({
    "format": "pipetrain.cluster", "version": 1,
    "devices": [{"count": 8, "name_prefix": "gpu", "kind": "gpu", "speed": 2.0, "memory_bytes": 1000}],
    "levels": [{"name": "node", "group_size": 4, "bandwidth": 100.0, "latency": 1.0},
               {"name": "rack", "group_size": 8, "bandwidth": 10.0, "latency": 2.0}]
  })");
}

TEST(ClusterSpec, DeviceShorthandExpands) {
  const ClusterSpec c = ClusterSpec::fromJson(twoNodesJson(), "c.json");
  ASSERT_EQ(c.size(), 8);
  EXPECT_EQ(c.device(0).name, "gpu0");
  EXPECT_EQ(c.device(7).name, "gpu7");
  EXPECT_EQ(c.indexOf("gpu5"), 5);
  EXPECT_EQ(c.indexOf("gpu8"), -1);
  EXPECT_EQ(c.device(3).kind, "gpu");
  EXPECT_DOUBLE_EQ(c.device(3).speed, 2.0);
  EXPECT_EQ(c.device(3).memory_bytes, 1000);
}

TEST(ClusterSpec, ExplicitDevicesDefaultsAndRoundTripWithInfiniteBandwidth) {
  const Json j = Json::parse(R"({
    "format": "pipetrain.cluster", "version": 1,
    "devices": [{"name": "a", "memory_bytes": 5}, {"name": "b", "kind": "fpga", "speed": 0.5, "memory_bytes": 6}],
    "levels": [{"name": "board", "group_size": 2, "bandwidth": "inf", "latency": 0}],
    "links": [{"a": "a", "b": "b", "bandwidth": 3.0, "latency": 0.5}]
  })");
  const ClusterSpec c = ClusterSpec::fromJson(j, "c.json");
  EXPECT_EQ(c.device(0).kind, "cpu");
  EXPECT_DOUBLE_EQ(c.device(0).speed, 1.0);
  EXPECT_TRUE(std::isinf(c.levels()[0].bandwidth));
  const Json written = c.toJson();
  EXPECT_EQ(written["levels"][0]["bandwidth"], "inf");
  EXPECT_EQ(ClusterSpec::fromJson(written, "written").toJson(), written);
}

// A size in exponent form, as people write 80 GB, is a JSON floating-point number.
TEST(ClusterSpec, MemoryMayBeWrittenWithAnExponent) {
  Json j = twoNodesJson();
  j["devices"][0]["memory_bytes"] = Json::parse("80e9");
  ASSERT_TRUE(j["devices"][0]["memory_bytes"].is_number_float());
  EXPECT_EQ(ClusterSpec::fromJson(j, "c.json").device(0).memory_bytes, int64_t{80000000000});
  j["devices"][0]["memory_bytes"] = 1.5;
  expectError([&] { ClusterSpec::fromJson(j, "c.json"); }, {"c.json", "memory_bytes", "whole number of bytes", "1.5"});
  j["devices"][0]["memory_bytes"] = -2e9;
  expectError([&] { ClusterSpec::fromJson(j, "c.json"); }, {"memory_bytes", "between"});
}

TEST(ClusterSpec, SameDeviceIsFree) {
  const ClusterSpec c = ClusterSpec::fromJson(twoNodesJson(), "c.json");
  const Route r = c.route(2, 2);
  EXPECT_TRUE(std::isinf(r.bandwidth));
  EXPECT_EQ(r.latency, 0);
  EXPECT_EQ(r.send_port, -1);
  EXPECT_EQ(r.recv_port, -1);
}

TEST(ClusterSpec, RoutesUseTheInnermostSharedLevel) {
  const ClusterSpec c = ClusterSpec::fromJson(twoNodesJson(), "c.json");
  const Route inside = c.route(0, 1);
  EXPECT_DOUBLE_EQ(inside.bandwidth, 100.0);
  EXPECT_DOUBLE_EQ(inside.latency, 1.0);
  const Route across = c.route(1, 6);
  EXPECT_DOUBLE_EQ(across.bandwidth, 10.0);
  EXPECT_DOUBLE_EQ(across.latency, 2.0);
}

TEST(ClusterSpec, DevicesOfANodeShareItsNicButNotTheirOwnPorts) {
  const ClusterSpec c = ClusterSpec::fromJson(twoNodesJson(), "c.json");
  // Inside a node every device has its own ports, per direction.
  EXPECT_NE(c.route(0, 1).send_port, c.route(2, 3).send_port);
  EXPECT_EQ(c.route(0, 1).send_port, c.route(0, 2).send_port);
  EXPECT_NE(c.route(0, 1).send_port, c.route(1, 0).recv_port);  // out and in are separate
  EXPECT_EQ(c.route(0, 1).recv_port, c.route(2, 1).recv_port);
  // Across nodes, all of node 0's GPUs send through one port and node 1's receive on one.
  EXPECT_EQ(c.route(0, 5).send_port, c.route(3, 7).send_port);
  EXPECT_EQ(c.route(0, 5).recv_port, c.route(2, 4).recv_port);
  EXPECT_NE(c.route(0, 5).send_port, c.route(5, 0).send_port);
  // The NIC is not the device's intra-node port.
  EXPECT_NE(c.route(0, 5).send_port, c.route(0, 1).send_port);
}

TEST(ClusterSpec, PortsAreDense) {
  const ClusterSpec c = ClusterSpec::fromJson(twoNodesJson(), "c.json");
  std::set<int> ports;
  for (int a = 0; a < c.size(); ++a)
    for (int b = 0; b < c.size(); ++b)
      if (a != b) {
        const Route r = c.route(a, b);
        ports.insert(r.send_port);
        ports.insert(r.recv_port);
      }
  // 8 devices x 2 directions inside nodes, 2 nodes x 2 directions between them.
  EXPECT_EQ(c.numPorts(), 20);
  EXPECT_EQ(static_cast<int>(ports.size()), c.numPorts());
  EXPECT_EQ(*ports.begin(), 0);
  EXPECT_EQ(*ports.rbegin(), c.numPorts() - 1);
}

TEST(ClusterSpec, TopLevelJoinsItsGroups) {
  // One level of groups of 4 over 8 devices: groups talk over that level too.
  Json j = twoNodesJson();
  j["levels"].erase(1);
  const ClusterSpec c = ClusterSpec::fromJson(j, "c.json");
  const Route r = c.route(1, 6);
  EXPECT_DOUBLE_EQ(r.bandwidth, 100.0);
  EXPECT_EQ(r.send_port, c.route(1, 2).send_port);
}

TEST(ClusterSpec, ExplicitLinkOverridesTheHierarchy) {
  Json j = twoNodesJson();
  j["links"] = Json::parse(R"([{"a": "gpu3", "b": "gpu4", "bandwidth": 50.0, "latency": 0.1}])");
  const ClusterSpec c = ClusterSpec::fromJson(j, "c.json");
  const Route there = c.route(3, 4), back = c.route(4, 3);
  EXPECT_DOUBLE_EQ(there.bandwidth, 50.0);
  EXPECT_DOUBLE_EQ(there.latency, 0.1);
  EXPECT_EQ(there.send_port, there.recv_port);  // one port per direction
  EXPECT_NE(there.send_port, back.send_port);
  EXPECT_NE(there.send_port, c.route(0, 4).send_port);  // not the NIC
  EXPECT_DOUBLE_EQ(c.route(2, 4).bandwidth, 10.0);       // other pairs keep the hierarchy
  EXPECT_EQ(c.numPorts(), 22);
}

TEST(ClusterSpec, WithoutLevelsOnlyLinkedPairsHaveRoutes) {
  const ClusterSpec c({{"a", "fpga", 1.0, 10}, {"b", "fpga", 1.0, 10}, {"c", "fpga", 1.0, 10}}, {},
                      {{"a", "b", 5.0, 0.0}});
  EXPECT_DOUBLE_EQ(c.route(1, 0).bandwidth, 5.0);
  expectError([&] { c.route(0, 2); }, {"'a'", "'c'"});
  const ClusterSpec single({{"solo", "cpu", 1.0, 10}}, {}, {});
  EXPECT_TRUE(std::isinf(single.route(0, 0).bandwidth));
}

TEST(ClusterSpec, Uniform) {
  const ClusterSpec c = ClusterSpec::uniform(3, 77, 9.0, 0.25);
  ASSERT_EQ(c.size(), 3);
  EXPECT_EQ(c.device(2).name, "dev2");
  EXPECT_EQ(c.device(2).kind, "cpu");
  EXPECT_EQ(c.device(2).memory_bytes, 77);
  ASSERT_EQ(c.levels().size(), 1u);
  EXPECT_EQ(c.levels()[0].name, "network");
  EXPECT_DOUBLE_EQ(c.route(0, 2).bandwidth, 9.0);
  EXPECT_DOUBLE_EQ(c.route(0, 2).latency, 0.25);
  const ClusterSpec free = ClusterSpec::uniform(2, 1, std::numeric_limits<double>::infinity(), 0.0);
  EXPECT_TRUE(std::isinf(free.route(0, 1).bandwidth));
  EXPECT_EQ(free.toJson()["levels"][0]["bandwidth"], "inf");
}

TEST(ClusterSpec, SharedCoresRoundTrip) {
  Json j = twoNodesJson();
  j["shared_cores"] = Json::parse(R"([{"devices": ["gpu0", "gpu1", "gpu2"], "cores": 2}])");
  const ClusterSpec c = ClusterSpec::fromJson(j, "c.json");
  ASSERT_EQ(c.sharedCores().size(), 1u);
  EXPECT_EQ(c.sharedCoresOf(1), 0);
  EXPECT_EQ(c.sharedCoresOf(3), -1);
  EXPECT_EQ(c.sharedCores()[0].cores, 2);
  const Json written = c.toJson();
  EXPECT_EQ(ClusterSpec::fromJson(written, "written").toJson(), written);
  EXPECT_FALSE(ClusterSpec::fromJson(twoNodesJson(), "c.json").toJson().contains("shared_cores"));
}

TEST(ClusterSpec, HostCostsRoundTripAndReachRoutes) {
  Json j = twoNodesJson();
  j["levels"][1]["host_overhead"] = 4e-5;
  j["levels"][1]["host_copy_bandwidth"] = 3e9;
  j["links"] = Json::parse(R"([{"a": "gpu0", "b": "gpu1", "bandwidth": 5.0, "latency": 0, "host_overhead": 1e-6}])");
  const ClusterSpec c = ClusterSpec::fromJson(j, "c.json");
  const Route across = c.route(0, 4);
  EXPECT_DOUBLE_EQ(across.host.seconds(3e9), 4e-5 + 1.0);
  EXPECT_DOUBLE_EQ(c.route(4, 0).host.seconds(0), 4e-5);    // both ways
  EXPECT_DOUBLE_EQ(c.route(1, 0).host.seconds(1e12), 1e-6);  // the link's: no copy rate given
  EXPECT_TRUE(c.route(1, 2).host.free());                    // the node level gives none
  EXPECT_TRUE(c.route(4, 4).host.free());                    // nothing leaves the device
  const Json written = c.toJson();
  EXPECT_FALSE(written["levels"][0].contains("host_overhead"));  // left out where free
  EXPECT_EQ(written["links"][0]["host_copy_bandwidth"], "inf");
  EXPECT_EQ(ClusterSpec::fromJson(written, "written").toJson(), written);

  j["levels"][1]["host_overhead"] = -1;
  expectError([&] { ClusterSpec::fromJson(j, "c.json"); }, {"c.json", "levels[1].host_overhead"});
  j["levels"][1]["host_overhead"] = 0;
  j["levels"][1]["host_copy_bandwidth"] = 0;
  expectError([&] { ClusterSpec::fromJson(j, "c.json"); }, {"c.json", "levels[1].host_copy_bandwidth"});
  const std::vector<Device> two = {{"a", "cpu", 1.0, 1}, {"b", "cpu", 1.0, 1}};
  expectError([&] { ClusterSpec(two, {}, {{"a", "b", 1.0, 0.0, {-1.0}}}, "c.json"); },
              {"c.json", "link 'a' - 'b'", "host_overhead"});
}

// GPUs whose messages go through host memory: the level says so, each device its link's
// rate, and each end of a message pays its own device's copy (messageEndSeconds).
TEST(ClusterSpec, ThroughHostCopiesAreEachEndsOwn) {
  Json j = twoNodesJson();
  j["levels"][1]["through_host"] = true;
  j["devices"][0]["host_link_bandwidth"] = 25e9;  // the shorthand's 8 devices
  const ClusterSpec c = ClusterSpec::fromJson(j, "c.json");
  const Route across = c.route(0, 4), within = c.route(0, 1);
  EXPECT_TRUE(across.through_host);
  EXPECT_FALSE(within.through_host);
  EXPECT_FALSE(c.route(0, 0).through_host);
  EXPECT_FALSE(endsFree(across));
  EXPECT_TRUE(endsFree(within));
  EXPECT_DOUBLE_EQ(messageEndSeconds(c.device(4), across, 50e9), 2.0);  // the shorthand gave all 8 the rate
  Device slower = c.device(4);
  slower.host_link_bandwidth = 12.5e9;
  EXPECT_DOUBLE_EQ(messageEndSeconds(slower, across, 50e9), 4.0);
  EXPECT_DOUBLE_EQ(messageEndSeconds(slower, within, 50e9), 0.0);
  const Json written = c.toJson();
  EXPECT_EQ(written["levels"][1]["through_host"], true);
  EXPECT_FALSE(written["levels"][0].contains("through_host"));
  EXPECT_FALSE(ClusterSpec::fromJson(twoNodesJson(), "c.json").toJson()["devices"][0].contains("host_link_bandwidth"));
  EXPECT_EQ(ClusterSpec::fromJson(written, "written").toJson(), written);
  j["devices"][0]["host_link_bandwidth"] = 0;
  expectError([&] { ClusterSpec::fromJson(j, "c.json"); }, {"c.json", "host_link_bandwidth"});
  j["devices"][0]["host_link_bandwidth"] = 25e9;
  j["levels"][1]["through_host"] = "yes";
  expectError([&] { ClusterSpec::fromJson(j, "c.json"); }, {"c.json", "through_host"});
}

// A CPU device's threads: said per device (or for a shorthand's devices), written only
// where said, and a count of at least one.
TEST(ClusterSpec, DeviceThreadsRoundTripWhereSaid) {
  Json j = twoNodesJson();
  EXPECT_EQ(ClusterSpec::fromJson(j, "c.json").device(0).threads, 0);
  EXPECT_FALSE(ClusterSpec::fromJson(j, "c.json").toJson()["devices"][0].contains("threads"));
  j["devices"][0]["threads"] = 2;  // the shorthand's 8 devices
  const ClusterSpec c = ClusterSpec::fromJson(j, "c.json");
  EXPECT_EQ(c.device(7).threads, 2);
  const Json written = c.toJson();
  EXPECT_EQ(written["devices"][3]["threads"], 2);
  EXPECT_EQ(ClusterSpec::fromJson(written, "written").toJson(), written);
  for (const Json& bad : {Json(0), Json(-1), Json(1.5), Json("two")}) {
    j["devices"][0]["threads"] = bad;
    expectError([&] { ClusterSpec::fromJson(j, "c.json"); }, {"c.json", "threads"});
  }
}

// The runtime's time around each action: said per device, written only where said,
// non-negative seconds.
TEST(ClusterSpec, ActionOverheadRoundTripsWhereSaid) {
  Json j = twoNodesJson();
  EXPECT_EQ(ClusterSpec::fromJson(j, "c.json").device(0).action_overhead, 0.0);
  EXPECT_FALSE(ClusterSpec::fromJson(j, "c.json").toJson()["devices"][0].contains("action_overhead"));
  j["devices"][0]["action_overhead"] = 25e-6;
  const ClusterSpec c = ClusterSpec::fromJson(j, "c.json");
  EXPECT_EQ(c.device(7).action_overhead, 25e-6);
  const Json written = c.toJson();
  EXPECT_EQ(written["devices"][3]["action_overhead"], 25e-6);
  EXPECT_EQ(ClusterSpec::fromJson(written, "written").toJson(), written);
  for (const Json& bad : {Json(-1e-6), Json("fast"), Json(1e9)}) {
    j["devices"][0]["action_overhead"] = bad;
    expectError([&] { ClusterSpec::fromJson(j, "c.json"); }, {"c.json", "action_overhead"});
  }
  std::vector<Device> devices = c.devices();
  devices[1].action_overhead = -1;
  expectError([&] { ClusterSpec(devices, c.levels(), c.links(), "built"); }, {"built", "action_overhead"});
  // Its share of each compute action, likewise.
  j["devices"][0]["action_overhead"] = 25e-6;
  j["devices"][0]["action_overhead_share"] = 0.0025;
  const ClusterSpec shared = ClusterSpec::fromJson(j, "c.json");
  EXPECT_EQ(shared.device(0).action_overhead_share, 0.0025);
  EXPECT_EQ(ClusterSpec::fromJson(shared.toJson(), "written").toJson(), shared.toJson());
  EXPECT_FALSE(written["devices"][0].contains("action_overhead_share"));
  for (const Json& bad : {Json(-0.1), Json(1.5)}) {
    j["devices"][0]["action_overhead_share"] = bad;
    expectError([&] { ClusterSpec::fromJson(j, "c.json"); }, {"c.json", "action_overhead_share"});
  }
  devices = c.devices();
  devices[1].action_overhead_share = 2;
  expectError([&] { ClusterSpec(devices, c.levels(), c.links(), "built"); }, {"built", "action_overhead_share"});
}

TEST(ClusterSpec, ComputeJitterRoundTripsWhereSaid) {
  Json j = twoNodesJson();
  EXPECT_EQ(ClusterSpec::fromJson(j, "c.json").device(0).compute_jitter, 0.0);  // steady
  EXPECT_FALSE(ClusterSpec::fromJson(j, "c.json").toJson()["devices"][0].contains("compute_jitter"));
  j["devices"][0]["compute_jitter"] = 0.04;
  const ClusterSpec c = ClusterSpec::fromJson(j, "c.json");
  EXPECT_EQ(c.device(0).compute_jitter, 0.04);
  EXPECT_EQ(ClusterSpec::fromJson(c.toJson(), "written").toJson(), c.toJson());
  for (const Json& bad : {Json(-0.1), Json(1.5), Json("some")}) {
    j["devices"][0]["compute_jitter"] = bad;
    expectError([&] { ClusterSpec::fromJson(j, "c.json"); }, {"c.json", "compute_jitter"});
  }
  std::vector<Device> devices = c.devices();
  devices[1].compute_jitter = 2;
  expectError([&] { ClusterSpec(devices, c.levels(), c.links(), "built"); }, {"built", "compute_jitter"});
}

TEST(ClusterSpec, AllreduceBandwidthRoundTripsAndDefaultsToTheBandwidth) {
  Json j = twoNodesJson();
  j["levels"][0]["allreduce_bandwidth"] = 20.0;
  j["levels"][0]["allreduce_host_bandwidth"] = 30.0;
  j["links"] = Json::parse(R"([{"a": "gpu0", "b": "gpu4", "bandwidth": 5.0, "latency": 0, "allreduce_bandwidth": 2.0}])");
  const ClusterSpec c = ClusterSpec::fromJson(j, "c.json");
  EXPECT_DOUBLE_EQ(c.route(1, 2).allreduce_bandwidth, 20.0);
  EXPECT_DOUBLE_EQ(c.route(1, 2).bandwidth, 100.0);  // messages keep the level's rate
  EXPECT_DOUBLE_EQ(c.route(1, 5).allreduce_bandwidth, 10.0);  // the rack level gives none
  EXPECT_DOUBLE_EQ(c.route(4, 0).allreduce_bandwidth, 2.0);   // the link's
  EXPECT_DOUBLE_EQ(c.route(1, 2).allreduce_host_bandwidth, 30.0);
  EXPECT_TRUE(std::isinf(c.route(1, 5).allreduce_host_bandwidth));  // costs no CPU where not given
  const Json written = c.toJson();
  EXPECT_FALSE(written["levels"][1].contains("allreduce_bandwidth"));  // left out where not given
  EXPECT_FALSE(written["levels"][1].contains("allreduce_host_bandwidth"));
  EXPECT_EQ(ClusterSpec::fromJson(written, "written").toJson(), written);

  j["levels"][0]["allreduce_host_bandwidth"] = -3;
  expectError([&] { ClusterSpec::fromJson(j, "c.json"); }, {"c.json", "levels[0].allreduce_host_bandwidth"});
  j["levels"][0]["allreduce_host_bandwidth"] = 30.0;

  j["levels"][0]["allreduce_bandwidth"] = 0;
  expectError([&] { ClusterSpec::fromJson(j, "c.json"); }, {"c.json", "levels[0].allreduce_bandwidth"});
  cluster::Level bad{"node", 2, 1.0, 0.0};
  bad.allreduce_bandwidth = -1;
  const std::vector<Device> two = {{"a", "cpu", 1.0, 1}, {"b", "cpu", 1.0, 1}};
  expectError([&] { ClusterSpec(two, {bad}, {}, "c.json"); }, {"c.json", "'node'", "allreduce_bandwidth"});
}

TEST(ClusterSpec, RejectsBadSharedCores) {
  const std::vector<Device> two = {{"a", "cpu", 1.0, 1}, {"b", "cpu", 1.0, 1}};
  expectError([&] { ClusterSpec(two, {}, {}, "c.json", {{{"a", "z"}, 1}}); }, {"c.json", "shared_cores[0]", "'z'"});
  expectError([&] { ClusterSpec(two, {}, {}, "c.json", {{{"a"}, 1}, {{"b", "a"}, 1}}); },
              {"c.json", "shared_cores[1]", "'a'", "shared_cores[0]"});
  expectError([&] { ClusterSpec(two, {}, {}, "c.json", {{{"a", "b"}, 0}}); }, {"c.json", "shared_cores[0]", "cores"});
  expectError([&] { ClusterSpec(two, {}, {}, "c.json", {{{}, 1}}); }, {"c.json", "shared_cores[0]", "no devices"});
  Json j = twoNodesJson();
  j["shared_cores"] = Json::parse(R"([{"devices": ["gpu0"], "core": 2}])");
  expectError([&] { ClusterSpec::fromJson(j, "c.json"); }, {"c.json", "shared_cores[0]", "core"});
  j["shared_cores"] = Json::parse(R"([{"devices": ["gpu0"], "cores": 0}])");
  expectError([&] { ClusterSpec::fromJson(j, "c.json"); }, {"c.json", "shared_cores[0].cores"});
}

TEST(ClusterSpec, RejectsInconsistentSpecs) {
  const std::vector<Device> two = {{"a", "cpu", 1.0, 1}, {"b", "cpu", 1.0, 1}};
  expectError([] { ClusterSpec({{"a", "cpu", 1.0, 1}, {"a", "cpu", 1.0, 1}}, {}, {}, "c.json"); },
              {"c.json", "'a'", "twice"});
  expectError([&] { ClusterSpec(two, {{"node", 4, 1.0, 0.0}, {"rack", 6, 1.0, 0.0}}, {}, "c.json"); },
              {"c.json", "'rack'", "group_size 6", "'node'"});
  expectError([&] { ClusterSpec(two, {{"node", 4, 1.0, 0.0}, {"rack", 4, 1.0, 0.0}}, {}, "c.json"); },
              {"c.json", "'rack'"});
  expectError([&] { ClusterSpec(two, {{"node", 2, 0.0, 0.0}}, {}, "c.json"); }, {"c.json", "'node'", "bandwidth"});
  expectError([&] { ClusterSpec(two, {}, {{"a", "z", 1.0, 0.0}}, "c.json"); }, {"c.json", "'z'"});
  expectError([&] { ClusterSpec(two, {}, {{"a", "b", 1.0, 0.0}, {"b", "a", 1.0, 0.0}}, "c.json"); },
              {"c.json", "'a'", "'b'", "twice"});
  expectError([] { ClusterSpec({{"a", "cpu", 0.0, 1}}, {}, {}, "c.json"); }, {"c.json", "'a'", "speed"});
  expectError([] { ClusterSpec({}, {}, {}, "c.json"); }, {"c.json", "no devices"});
}

TEST(ClusterSpec, RejectsWrongHeaderTyposAndBadValues) {
  Json j = twoNodesJson();
  j["version"] = 7;
  expectError([&] { ClusterSpec::fromJson(j, "c.json"); }, {"c.json", "version 7"});
  j = twoNodesJson();
  j["format"] = "pipetrain.layer_graph";
  expectError([&] { ClusterSpec::fromJson(j, "c.json"); }, {"c.json", "pipetrain.cluster"});
  j = twoNodesJson();
  j["devices"] = Json::parse(R"([{"name": "x", "memroy_bytes": 4}])");
  expectError([&] { ClusterSpec::fromJson(j, "c.json"); }, {"c.json", "devices[0]", "memroy_bytes"});
  j = twoNodesJson();
  j["levels"][1]["bandwidth"] = "infinite";
  expectError([&] { ClusterSpec::fromJson(j, "c.json"); }, {"c.json", "levels[1].bandwidth", "\"inf\""});
  j = twoNodesJson();
  j["devices"][0]["count"] = 0;
  expectError([&] { ClusterSpec::fromJson(j, "c.json"); }, {"c.json", "devices[0].count"});
  j = twoNodesJson();
  j["devices"][0]["name"] = "gpu";  // the shorthand takes a prefix, not a name
  expectError([&] { ClusterSpec::fromJson(j, "c.json"); }, {"c.json", "devices[0]", "\"name\""});
}

}  // namespace
}  // namespace pipetrain::cluster
