#include "pipetrain/planner/profile_caveat.h"

namespace pipetrain::planner {

std::string profileCaveat(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster) {
  const graph::ProfiledAs& how = graph.profiledAs();
  if (how.threads <= 1 || how.shares != 1) return "";
  int cpus = 0;
  for (int d = 0; d < cluster.size(); ++d) cpus += cluster.device(d).kind == "cpu";
  if (cpus < 2) return "";
  return "this profile was taken by one process timing the whole model on " + std::to_string(how.threads) +
         " threads; ranks that share a host's cores each compute on fewer, and hold only their stage, so the "
         "predictions for these " + std::to_string(cpus) +
         " CPU devices are likely too fast (on a 2-core host, 2 ranks ran at about half of it). Profile as the "
         "ranks run (`profile --threads T --share K/P`, one process per rank at once), or let `train --batch` plan";
}

}  // namespace pipetrain::planner
