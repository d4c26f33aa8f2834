#include "pipetrain/cluster/chain_order.h"

#include <algorithm>

namespace pipetrain::cluster {

ClusterSpec chainOrder(const ClusterSpec& cluster, double spread) {
  if (cluster.links().empty() || cluster.size() < 3) return cluster;
  const int group = cluster.levels().size() >= 2 ? cluster.levels().front().group_size : 1;
  const int groups = cluster.size() / group;
  std::vector<int> order{0};
  std::vector<bool> placed(groups, false);
  placed[0] = true;
  while (static_cast<int>(order.size()) < groups) {
    const int last = order.back() * group;
    double fastest = 0;
    for (int g = 0; g < groups; ++g)
      if (!placed[g]) fastest = std::max(fastest, cluster.route(last, g * group).bandwidth);
    int next = 0;
    while (placed[next] || cluster.route(last, next * group).bandwidth * spread < fastest) ++next;
    placed[next] = true;
    order.push_back(next);
  }
  std::vector<Device> devices;
  for (int g : order)
    for (int i = 0; i < group; ++i) devices.push_back(cluster.device(g * group + i));
  return ClusterSpec(std::move(devices), cluster.levels(), cluster.links(), "cluster", cluster.sharedCores());
}

}  // namespace pipetrain::cluster
