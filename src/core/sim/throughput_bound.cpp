#include "pipetrain/sim/throughput_bound.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "pipetrain/plan/plan_program.h"

namespace pipetrain::sim {

double throughputBound(const CostModel& costs) {
  const plan::Plan& plan = costs.plan();
  const std::vector<std::vector<int>> stage_ranks = plan::stageRanks(plan);
  const double m = plan.microbatches;
  // An overlapped F&B pair takes overlapFactor() of the two (DualPipeV).
  const double overlap = std::min(1.0, costs.overlapFactor());
  std::vector<double> busy(costs.numRanks(), 0.0);               // seconds per mini-batch
  std::vector<double> wire(costs.cluster().numPorts(), 0.0);      // seconds per mini-batch
  for (int s = 0; s < plan.numStages(); ++s) {
    const StageCosts& c = costs.stage(s);
    const auto& ranks = stage_ranks[s];
    const int replicas = static_cast<int>(ranks.size());
    // A split schedule's W may cost less than the fused backward's weight part.
    const double work = (c.forward + c.backward_input + std::min(c.backward_weight, c.split_weight)) * overlap;
    for (int r : ranks)
      busy[r] += (m / replicas * work + c.optimizer_step) / costs.cluster().device(costs.deviceOfRank(r)).speed;
    // Micro-batch i crosses the edge from replica i mod r_s to replica i mod r_t, so the
    // pattern repeats every lcm(r_s, r_t) micro-batches: any m consecutive ones hold
    // at least floor(m / lcm) whole periods, whichever mini-batch is measured.
    for (int t : costs.dag().succs[s]) {
      const auto& to_ranks = stage_ranks[t];
      const int period = std::lcm(replicas, static_cast<int>(to_ranks.size()));
      const double periods = std::floor(m / period);
      if (periods == 0) continue;
      const double bytes = costs.edgeBytes(s, t);
      for (int i = 0; i < period; ++i) {
        const int from = ranks[i % replicas], to = to_ranks[i % to_ranks.size()];
        for (const auto& [a, b] : {std::pair{from, to}, std::pair{to, from}}) {  // activation, gradient
          const cluster::Route route = costs.route(a, b);
          const double seconds = periods * bytes / route.bandwidth;  // 0 on one device
          if (route.send_port >= 0) wire[route.send_port] += seconds;
          if (route.recv_port >= 0) wire[route.recv_port] += seconds;
          if (!route.host.free()) {
            busy[a] += periods * route.host.seconds(bytes);
            busy[b] += periods * route.host.seconds(bytes);
          }
        }
      }
    }
  }
  double busiest = 0;
  for (double b : busy) busiest = std::max(busiest, b);
  for (double w : wire) busiest = std::max(busiest, w);
  return busiest > 0 ? static_cast<double>(plan.samplesPerMinibatch()) / busiest
                     : std::numeric_limits<double>::infinity();
}

}  // namespace pipetrain::sim
