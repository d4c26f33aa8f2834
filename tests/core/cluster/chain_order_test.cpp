// chainOrder: hosts joined by a slow link go to the chain's end, and a cluster whose
// links are alike keeps its order.
#include "pipetrain/cluster/chain_order.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pipetrain::cluster {
namespace {

std::vector<std::string> names(const ClusterSpec& c) {
  std::vector<std::string> out;
  for (const Device& d : c.devices()) out.push_back(d.name);
  return out;
}

// Three hosts of `per_host` devices on a network of 100 B/s, host "b"'s link 10x slower
// than the others when `slow_b` (explicit links to each of its devices).
ClusterSpec threeHosts(int per_host, bool slow_b, double fast = 100) {
  std::vector<Device> devices;
  for (const char* h : {"a", "b", "c"})
    for (int i = 0; i < per_host; ++i) devices.push_back({std::string(h) + std::to_string(i), "cpu", 1.0, 1000});
  std::vector<Level> levels;
  if (per_host > 1) levels.push_back({"host", per_host, 1000, 0});
  levels.push_back({"network", 3 * per_host, fast, 0.01});
  std::vector<Link> links;
  if (slow_b)
    for (const char* other : {"a", "c"})
      for (int i = 0; i < per_host; ++i)
        for (int j = 0; j < per_host; ++j)
          links.emplace_back("b" + std::to_string(i), std::string(other) + std::to_string(j), 10, 0.01);
  return ClusterSpec(devices, levels, links);
}

TEST(ChainOrder, ASlowHostGoesToTheEndOfTheChain) {
  EXPECT_EQ(names(chainOrder(threeHosts(1, true))), (std::vector<std::string>{"a0", "c0", "b0"}));
  // Hosts of two devices move whole: a host's devices stay one level-0 group.
  const ClusterSpec two = chainOrder(threeHosts(2, true));
  EXPECT_EQ(names(two), (std::vector<std::string>{"a0", "a1", "c0", "c1", "b0", "b1"}));
  EXPECT_DOUBLE_EQ(two.route(1, 2).bandwidth, 100);  // the levels and links hold as before
  EXPECT_DOUBLE_EQ(two.route(3, 4).bandwidth, 10);
  EXPECT_DOUBLE_EQ(two.route(4, 5).bandwidth, 1000);
}

TEST(ChainOrder, LinksAlikeKeepTheOrder) {
  EXPECT_EQ(names(chainOrder(threeHosts(1, false))), (std::vector<std::string>{"a0", "b0", "c0"}));
  // Links to b 1.2x slower than the network's: within kLinkSpread, measurement noise.
  EXPECT_EQ(names(chainOrder(threeHosts(1, true, 12))), (std::vector<std::string>{"a0", "b0", "c0"}));
}

}  // namespace
}  // namespace pipetrain::cluster
