#include "pipetrain/sim/plan_traffic.h"

#include <map>
#include <utility>

#include "pipetrain/plan/plan_program.h"
#include "pipetrain/schedule/action.h"

namespace pipetrain::sim {

std::vector<LinkTraffic> planTraffic(const CostModel& cost) {
  const cluster::ClusterSpec& cluster = cost.cluster();
  const schedule::Program one = plan::programForPlan(cost.plan(), cost.dag(), 1, plan::Check::kSkip);
  std::vector<LinkTraffic> traffic;
  // Per (producer, consumer) stage pair and link: the messages of one mini-batch.
  std::map<std::pair<std::pair<int, int>, std::string>, LinkTraffic> messages;
  for (int rank = 0; rank < one.numRanks(); ++rank)
    for (const schedule::Action& a : one.ranks[rank]) {
      if (!schedule::isSend(a.type)) continue;
      const auto [backward, producer, consumer, microbatch] = schedule::messageOf(a);
      const int peer = one.rankOf(a.peer_stage, microbatch);
      const int from = cost.deviceOfRank(rank), to = cost.deviceOfRank(peer);
      const cluster::Route route = cluster.route(from, to);
      const std::string link = cluster.routeName(from, to);
      LinkTraffic& t = messages[{{producer, consumer}, link}];
      t.link = link;
      t.what = "stages " + std::to_string(producer) + " -> " + std::to_string(consumer);
      const double bytes = cost.messageBytes(a);
      t.bytes += bytes;
      t.wire_seconds += bytes / route.bandwidth;
    }
  for (auto& [key, t] : messages) traffic.push_back(t);
  for (int s = 0; s < cost.plan().numStages(); ++s) {
    const std::vector<int>& ring = one.stage_ranks[s];
    const int n = static_cast<int>(ring.size());
    if (n < 2) continue;
    // The ring's slowest hop sets its pace.
    LinkTraffic t;
    double slowest = 0;
    for (int i = 0; i < n; ++i) {
      const int from = cost.deviceOfRank(ring[i]), to = cost.deviceOfRank(ring[(i + 1) % n]);
      const cluster::Route route = cluster.route(from, to);
      const double seconds_per_byte = 1 / route.allreduce_bandwidth;
      if (seconds_per_byte > slowest) {
        slowest = seconds_per_byte;
        t.link = cluster.routeName(from, to);
      }
    }
    t.what = "stage " + std::to_string(s) + "'s all-reduce (" + std::to_string(n) + " replicas)";
    t.bytes = 2.0 * (n - 1) / n * cost.stage(s).param_bytes;
    t.wire_seconds = t.bytes * slowest;
    traffic.push_back(t);
  }
  return traffic;
}

json_io::Json trafficToJson(const std::vector<LinkTraffic>& traffic) {
  json_io::Json out = json_io::Json::array();
  for (const LinkTraffic& t : traffic)
    out.push_back({{"link", t.link}, {"what", t.what}, {"bytes", t.bytes}, {"wire_seconds", t.wire_seconds}});
  return out;
}

}  // namespace pipetrain::sim
