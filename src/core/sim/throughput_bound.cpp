#include "pipetrain/sim/throughput_bound.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

#include "pipetrain/plan/plan_program.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/sim/evaluate.h"

namespace pipetrain::sim {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// A stage's passes per micro-batch at the speed of its fastest replica's device.
struct StageSpeed {
  double forward = 0, input_grad = 0;
};

}  // namespace

double throughputBound(const CostModel& costs) {
  const plan::Plan& plan = costs.plan();
  const cluster::ClusterSpec& cluster = costs.cluster();
  const std::vector<std::vector<int>> stage_ranks = plan::stageRanks(plan);
  const int stages = plan.numStages();
  const double m = plan.microbatches;
  auto speedOf = [&](int rank) { return cluster.device(costs.deviceOfRank(rank)).speed; };
  const schedule::ScheduleTraits& traits = schedule::traits(plan.schedule.name);
  // An overlapped F&B pair takes overlapFactor() of the two (DualPipeV).
  const double overlap = std::min(1.0, costs.overlapFactor());
  std::vector<double> busy(costs.numRanks(), 0.0);  // seconds per mini-batch
  std::vector<double> wire(cluster.numPorts(), 0.0);  // seconds per mini-batch
  std::vector<StageSpeed> fastest(stages);
  double stage_busiest = 0;  // seconds per mini-batch of the busiest stage, over its replicas
  // [s][k]: the quickest a message crosses s -> succs[s][k], and its gradient back
  std::vector<std::vector<double>> there(stages), back(stages);
  for (int s = 0; s < stages; ++s) {
    const StageCosts& c = costs.stage(s);
    const auto& ranks = stage_ranks[s];
    const int replicas = static_cast<int>(ranks.size());
    // A split schedule's W may cost less than the fused backward's weight part.
    const double work =
        (c.forward + c.recompute + c.backward_input + std::min(c.backward_weight, c.split_weight)) * overlap;
    // Replicas take micro-batches in turn, so in any m consecutive ones each runs at
    // least floor(m / r) (whichever mini-batch is measured), and together they run m:
    // the stage takes at least m passes over its replicas' summed speeds.
    const double share = std::floor(m / replicas);
    // Each replica steps once a mini-batch, or under PipeDream's rule once a round of
    // one micro-batch per replica: at least `share` times.
    const double steps = traits.step_rule == schedule::StepRule::kPerMicrobatch ? share : 1;
    double speed = 0, speeds = 0;
    for (int r : ranks) {
      busy[r] += (share * work + steps * c.optimizer_step) / speedOf(r);
      speed = std::max(speed, speedOf(r));
      speeds += speedOf(r);
    }
    stage_busiest = std::max(stage_busiest, m * work / speeds);
    // A replica's all-reduce holds its rank from its last backward pass (fused B, or a
    // split schedule's last W) until the reduction ends. The reduction starts at the
    // earliest once that pass has filled its first bucket (the simulator's rule), so all
    // but the pass's later share of it adds to the rank's time; its host share comes
    // after the pass whole. Over slow links it can outweigh the compute (PipeDream's
    // GNMT on 128 GPUs: a stage's 0.15 s reduction beside its 0.14 s of passes); without
    // it, plans there were bounded at twice what they ran (docs/planner.md, "Bounds that
    // count the all-reduce").
    if (replicas > 1 && !schedule::multiStage(traits)) {
      const double last_pass = c.recompute + c.backward_input + std::max(c.backward_weight, c.split_weight);
      for (int r : ranks) {
        const double hidden = last_pass / speedOf(r) * (1 - firstBucketShare(c.param_bytes));
        busy[r] += steps * std::max({0.0, costs.allreduceHostSeconds(s), costs.allreduceSeconds(s) - hidden});
      }
    }
    fastest[s] = {c.forward / speed, (c.recompute + c.backward_input) / speed};
    // Micro-batch i crosses the edge from replica i mod r_s to replica i mod r_t, so the
    // pattern repeats every lcm(r_s, r_t) micro-batches: any m consecutive ones hold
    // at least floor(m / lcm) whole periods, whichever mini-batch is measured.
    for (int t : costs.dag().succs[s]) {
      const auto& to_ranks = stage_ranks[t];
      const int period = std::lcm(replicas, static_cast<int>(to_ranks.size()));
      const double periods = std::floor(m / period), bytes = costs.edgeBytes(s, t);
      double quickest_there = kInfinity, quickest_back = kInfinity;
      for (int i = 0; i < period; ++i) {
        const int from = ranks[i % replicas], to = to_ranks[i % to_ranks.size()];
        for (const bool gradient : {false, true}) {
          const int a = gradient ? to : from, b = gradient ? from : to;
          const cluster::Route route = costs.route(a, b);
          (gradient ? quickest_back : quickest_there) =
              std::min(gradient ? quickest_back : quickest_there, transferSeconds(bytes, route));
          const double seconds = periods * bytes / route.bandwidth;  // 0 on one device
          if (route.send_port >= 0) wire[route.send_port] += seconds;
          if (route.recv_port >= 0) wire[route.recv_port] += seconds;
          if (!cluster::endsFree(route)) {  // the route is the same both ways
            const cluster::ClusterSpec& c = costs.cluster();
            busy[a] += periods * cluster::messageEndSeconds(c.device(costs.deviceOfRank(a)), route, bytes);
            busy[b] += periods * cluster::messageEndSeconds(c.device(costs.deviceOfRank(b)), route, bytes);
          }
        }
      }
      there[s].push_back(quickest_there);
      back[s].push_back(quickest_back);
    }
  }
  double busiest = stage_busiest;
  for (double b : busy) busiest = std::max(busiest, b);
  for (double w : wire) busiest = std::max(busiest, w);

  // Little's law on each stage: a micro-batch's activations stay on its replica at
  // least from the start of its forward pass to the end of its input gradient, which
  // waits for the round trip through every stage after it (their passes, and the
  // messages between, each alone on its route). The schedule lets a replica hold at
  // most K of them at once (inflightMicrobatchesBound, over the whole pipeline's depth),
  // so its share of the mini-batch takes at least share x round trip / K. It binds
  // where a deep pipeline of few micro-batches in flight crosses slow links; where a
  // rank runs several stages its stages share the K, and the law is not applied.
  if (!schedule::multiStage(traits)) {
    std::vector<double> round_trip(stages, -1);
    std::function<double(int)> roundTrip = [&](int s) {
      if (round_trip[s] >= 0) return round_trip[s];
      double downstream = 0;
      const auto& succs = costs.dag().succs[s];
      for (std::size_t k = 0; k < succs.size(); ++k)
        downstream = std::max(downstream, there[s][k] + roundTrip(succs[k]) + back[s][k]);
      return round_trip[s] = fastest[s].forward + downstream + fastest[s].input_grad;
    };
    for (int s = 0; s < stages; ++s) {
      const int replicas = static_cast<int>(stage_ranks[s].size());
      const int share = static_cast<int>(m) / replicas;  // every replica runs at least this many
      if (share < 1) continue;
      const int in_flight = schedule::inflightMicrobatchesBound(
          traits.kind, stages, schedule::busiestReplicaShare(plan.microbatches, replicas));
      busiest = std::max(busiest, share * roundTrip(s) / in_flight);
    }
  }
  return busiest > 0 ? windowAllowance(plan.schedule.name) * static_cast<double>(plan.samplesPerMinibatch()) / busiest
                     : kInfinity;
}

double windowAllowance(const std::string& schedule) {
  return schedule::isAsynchronous(schedule) ? static_cast<double>(kSteadyWindow + 1) / kSteadyWindow : 1.0;
}

}  // namespace pipetrain::sim
