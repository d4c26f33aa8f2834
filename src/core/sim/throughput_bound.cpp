#include "pipetrain/sim/throughput_bound.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <vector>

#include "pipetrain/plan/plan_program.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/schedule/schedules.h"
#include "pipetrain/sim/evaluate.h"

namespace pipetrain::sim {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// A stage's passes per micro-batch at the speed of its fastest replica's device.
struct StageSpeed {
  double forward = 0;
  double input_grad = 0;  // until its input gradient leaves: a fused B whole, a split schedule's I
  double backward = 0;    // the whole backward pass
};

// The quickest a micro-batch can cross the stages: their passes at their fastest
// replicas' speeds, each message alone on the quickest route it may take.
struct Paths {
  std::vector<StageSpeed> fastest;
  std::vector<std::vector<double>> there, back;  // [s][k]: s -> succs[s][k], and the gradient back
  std::vector<int> order;                        // the stages, each after its predecessors
  std::vector<double> downstream;                // [s]: from s's forward pass to its input gradient's return
};

// order and downstream, from the stage graph and the passes and messages.
void fillOrderAndDownstream(Paths& paths, const schedule::StageDag& dag) {
  std::vector<int> waiting(dag.size());
  for (int s = 0; s < dag.size(); ++s)
    if ((waiting[s] = static_cast<int>(dag.preds[s].size())) == 0) paths.order.push_back(s);
  for (std::size_t i = 0; i < paths.order.size(); ++i)
    for (int t : dag.succs[paths.order[i]])
      if (--waiting[t] == 0) paths.order.push_back(t);
  paths.downstream.assign(dag.size(), 0);
  for (auto it = paths.order.rbegin(); it != paths.order.rend(); ++it)
    for (std::size_t k = 0; k < dag.succs[*it].size(); ++k) {
      const int t = dag.succs[*it][k];
      const double beyond = paths.fastest[t].forward + paths.downstream[t] + paths.fastest[t].input_grad;
      paths.downstream[*it] = std::max(paths.downstream[*it], paths.there[*it][k] + beyond + paths.back[*it][k]);
    }
}

// GPipe's turn: every rank runs all its forward passes of a mini-batch before any
// backward pass, so the backward passes wait for the forward passes to reach the end.
// A replica of some stage L (the turn) finishes its forward passes at the earliest once
// its last micro-batch (one of the last r_L) has come from some stage a before it,
// whose replica ran every micro-batch before that one in turn (at least
// (m - r_L + 1) / r_a of them), along the longest path from a to L. L's first input
// gradient then goes back along the longest path to some stage b, whose replica runs
// its share's backward passes, and on to the first stage (tail), which closes the
// mini-batch. The longest such route bounds a mini-batch: GPipe's bubble, which the
// passes alone do not see.
double turnBound(const CostModel& costs, const std::vector<std::vector<int>>& stage_ranks, int source,
                 const Paths& paths, const std::vector<double>& head, const std::vector<double>& tail, double close) {
  const auto& [fastest, there, back, order, downstream] = paths;
  const schedule::StageDag& dag = costs.dag();
  const int stages = dag.size(), m = costs.plan().microbatches;
  auto replicas = [&](int s) { return static_cast<int>(stage_ranks[s].size()); };
  double longest = 0;
  for (int turn = 0; turn < stages; ++turn) {
    // From the end of a's forward pass to the end of the turn's, and from the turn's
    // last forward pass to b's input gradient arriving; -1 where no path joins them.
    std::vector<double> to_turn(stages, -1), from_turn(stages, -1);
    to_turn[turn] = from_turn[turn] = 0;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const int a = *it;
      for (std::size_t k = 0; k < dag.succs[a].size(); ++k) {
        const int t = dag.succs[a][k];
        if (to_turn[t] >= 0) to_turn[a] = std::max(to_turn[a], there[a][k] + fastest[t].forward + to_turn[t]);
        if (from_turn[t] >= 0) from_turn[a] = std::max(from_turn[a], from_turn[t] + fastest[t].input_grad + back[a][k]);
      }
    }
    double forwards_end = 0, backwards_end = 0;
    for (int a = 0; a < stages; ++a) {
      if (to_turn[a] < 0) continue;  // to_turn and from_turn reach the same stages
      const int before_last = std::max(1, (m - replicas(turn) + 1) / replicas(a));
      forwards_end = std::max(forwards_end, head[a] + before_last * fastest[a].forward + to_turn[a]);
      // The first stage's last pass ends the tail at its input gradient; close counts the rest.
      double own = std::floor(static_cast<double>(m) / replicas(a)) * fastest[a].backward;
      if (a == source) own -= fastest[a].backward - fastest[a].input_grad;
      backwards_end = std::max(backwards_end, from_turn[a] + own + tail[a]);
    }
    longest = std::max(longest, forwards_end + backwards_end + close);
  }
  return longest;
}

// Fill and drain, where each mini-batch starts empty (a flush) on a chain or a graph
// with one first stage. A replica of stage s starts its first forward pass at the
// earliest once the first micro-batch has come through the stages before it (head).
// After its last input gradient, that gradient travels back to the first stage (tail),
// whose last backward pass ends, whose replicas meet in the all-reduce and step
// (close); only then does the first stage start the next mini-batch. So a mini-batch
// takes at least head + the replica's span + tail + close, where the span is at least
// its passes; or a forward pass, the micro-batch's trip to the end and back, and then
// its passes but the forward passes it ran ahead; or its Little's-law time. Without it,
// a GPipe of 6 stages at 12 micro-batches per replica on PipeDream's GNMT over 128
// GPUs was bounded by its passes alone, 26% above what it runs at, and few of its
// neighbours were pruned unsimulated (docs/planner.md, "Bounds that count the fill and
// drain"). `held`: Little's-law time per stage; `ahead`: forwards before the first
// backward pass.
double fillAndDrainBound(const CostModel& costs, const std::vector<std::vector<int>>& stage_ranks, const Paths& paths,
                         const std::vector<double>& waited_on, const std::vector<double>& held,
                         const std::vector<int>& ahead) {
  const auto& [fastest, there, back, order, downstream] = paths;
  const auto& preds = costs.dag().preds;
  const int stages = costs.dag().size();
  if (std::count_if(preds.begin(), preds.end(), [](const auto& p) { return p.empty(); }) != 1) return 0;
  const int source = static_cast<int>(
      std::find_if(preds.begin(), preds.end(), [](const auto& p) { return p.empty(); }) - preds.begin());
  auto speedOf = [&](int rank) { return costs.cluster().device(costs.deviceOfRank(rank)).speed; };
  const schedule::ScheduleTraits& traits = schedule::traits(costs.plan().schedule.name);
  std::vector<double> head(stages, 0.0), tail(stages, 0.0);  // from the predecessors', in order
  for (int s : order)
    for (int p : preds[s]) {
      const auto& succs = costs.dag().succs[p];
      const auto k = std::find(succs.begin(), succs.end(), s) - succs.begin();
      head[s] = std::max(head[s], head[p] + fastest[p].forward + there[p][k]);
      tail[s] = std::max(tail[s], back[p][k] + fastest[p].input_grad + tail[p]);
    }
  // The tail ends where the first stage's last input gradient does: with a fused last
  // pass whole, before a split schedule's last W. The all-reduce begins once that pass
  // has filled its first bucket (the simulator's rule).
  const StageCosts& c = costs.stage(source);
  const double last_pass = traits.split_backward ? c.split_weight : c.recompute + c.backward_input + c.backward_weight;
  const double lead = traits.split_backward ? 0 : last_pass;  // of the last pass, before the tail's end
  double close = kInfinity;
  for (int r : stage_ranks[source]) {
    const double speed = speedOf(r);
    double after = (last_pass - lead) / speed;
    if (stage_ranks[source].size() > 1)
      after = std::max(after + costs.allreduceHostSeconds(source),
                       (last_pass * firstBucketShare(c.param_bytes) - lead) / speed + costs.allreduceSeconds(source));
    close = std::min(close, std::max(0.0, after) + c.optimizer_step / speed);
  }
  double longest = 0;
  for (int s = 0; s < stages; ++s) {
    if (s == source) continue;  // its own passes, all-reduce and step are its busy time
    const int share = costs.plan().microbatches / static_cast<int>(stage_ranks[s].size());
    for (int r : stage_ranks[s]) {
      const double forward = costs.stage(s).forward / speedOf(r);
      const double span = std::max(
          {waited_on[r], forward + downstream[s] + waited_on[r] - std::min(share, ahead[s]) * forward, held[s]});
      longest = std::max(longest, head[s] + span + tail[s] + close);
    }
  }
  if (traits.all_forwards_first)
    longest = std::max(longest, turnBound(costs, stage_ranks, source, paths, head, tail, close));
  return longest;
}

// A pipeline's stages wait on each other (one stage per rank): Little's law on each
// stage, and where each mini-batch starts empty, its fill and drain; seconds per
// mini-batch.
double pipelineBound(const CostModel& costs, const std::vector<std::vector<int>>& stage_ranks, Paths& paths,
                     const std::vector<double>& waited_on) {
  const plan::Plan& plan = costs.plan();
  const int stages = plan.numStages();
  const auto& [fastest, there, back, order, downstream] = paths;
  double busiest = 0;
  fillOrderAndDownstream(paths, costs.dag());
  std::vector<int> replica_counts;
  for (const auto& ranks : stage_ranks) replica_counts.push_back(static_cast<int>(ranks.size()));
  const std::vector<int> ahead =
      schedule::forwardsBeforeFirstBackward(plan.schedule.name, costs.dag(), replica_counts, plan.microbatches);
  // Little's law on each stage: a micro-batch's activations stay on its replica at
  // least from the start of its forward pass to the end of its input gradient, which
  // waits for the round trip through every stage after it (their passes, and the
  // messages between, each alone on its route). The schedule lets a replica hold at
  // most K of them at once (schedule::forwardsBeforeFirstBackward: 1F1B's warm-up, one
  // on a replicated stage behind fewer replicas), so its share of the mini-batch takes
  // at least share x round trip / K. It binds where a deep pipeline of few micro-batches
  // in flight crosses slow links; where a rank runs several stages its stages share the
  // K, and the law is not applied.
  std::vector<double> held(stages, 0.0);  // [s]: share x round trip / K
  for (int s = 0; s < stages; ++s) {
    const int share = plan.microbatches / replica_counts[s];  // every replica runs at least this many
    held[s] = share * (fastest[s].forward + downstream[s] + fastest[s].input_grad) / ahead[s];
    busiest = std::max(busiest, held[s]);
  }
  if (!schedule::isAsynchronous(plan.schedule.name))
    busiest = std::max(busiest, fillAndDrainBound(costs, stage_ranks, paths, waited_on, held, ahead));
  return busiest;
}

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
  // Each replica steps once a mini-batch, or under PipeDream's rule once a round of one
  // micro-batch per replica: at least floor(m / r) times.
  auto stepsOf = [&](int replicas) {
    return traits.step_rule == schedule::StepRule::kPerMicrobatch ? std::floor(m / replicas) : 1.0;
  };
  std::vector<double> busy(costs.numRanks(), 0.0);  // seconds per mini-batch
  // Seconds per mini-batch of each rank's passes that the stages before it wait on: its
  // forward passes and the backward passes that yield input gradients (a split
  // schedule's W may run while they wait).
  std::vector<double> waited_on(costs.numRanks(), 0.0);
  std::vector<double> wire(cluster.numPorts(), 0.0);  // seconds per mini-batch
  // Per rank: the most host time of one micro-batch's input gradients sent back, on
  // each edge into its stage the costliest it sends on.
  std::vector<double> gradients_sent(costs.numRanks(), 0.0);
  Paths paths;
  auto& [fastest, there, back, order, downstream] = paths;
  fastest.resize(stages);
  there.resize(stages);
  back.resize(stages);
  double stage_busiest = 0;  // seconds per mini-batch of the busiest stage, over its replicas
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
    const double steps = stepsOf(replicas);
    const double passes_waited_on =
        (c.forward + c.recompute + c.backward_input + (traits.split_backward ? 0 : c.backward_weight)) * overlap;
    double speed = 0, speeds = 0;
    for (int r : ranks) {
      busy[r] += (share * work + steps * c.optimizer_step) / speedOf(r);
      waited_on[r] += share * passes_waited_on / speedOf(r);
      speed = std::max(speed, speedOf(r));
      speeds += speedOf(r);
    }
    stage_busiest = std::max(stage_busiest, m * work / speeds);
    // A fused backward pass sends its input gradient when it ends, weights' part and all;
    // a split schedule's I sends it without the W.
    const double backward = c.recompute + c.backward_input + c.backward_weight;
    fastest[s] = {c.forward / speed, (traits.split_backward ? c.recompute + c.backward_input : backward) / speed,
                  backward / speed};
    // Micro-batch i crosses the edge from replica i mod r_s to replica i mod r_t, so the
    // pattern repeats every lcm(r_s, r_t) micro-batches: any m consecutive ones hold
    // at least floor(m / lcm) whole periods, whichever mini-batch is measured.
    for (int t : costs.dag().succs[s]) {
      const auto& to_ranks = stage_ranks[t];
      const int period = std::lcm(replicas, static_cast<int>(to_ranks.size()));
      const double periods = std::floor(m / period), bytes = costs.edgeBytes(s, t);
      double quickest_there = kInfinity, quickest_back = kInfinity;
      std::map<int, double> costliest_sent;  // by the rank of t that sends the gradient
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
            const double at_a = cluster::messageEndSeconds(c.device(costs.deviceOfRank(a)), route, bytes);
            busy[a] += periods * at_a;
            busy[b] += periods * cluster::messageEndSeconds(c.device(costs.deviceOfRank(b)), route, bytes);
            if (gradient) costliest_sent[a] = std::max(costliest_sent[a], at_a);
          }
        }
      }
      there[s].push_back(quickest_there);
      back[s].push_back(quickest_back);
      for (const auto& [rank, seconds] : costliest_sent) gradients_sent[rank] += seconds;
    }
  }
  // A replica's all-reduce holds its rank from its last backward pass (fused B, or a
  // split schedule's last W) until the reduction ends. The reduction starts at the
  // earliest once that pass has filled its first bucket (the simulator's rule), so all
  // but the pass's later share of it adds to the rank's time, and so does all but the
  // host's share of the gradients the pass sends back (counted with the messages
  // above); its host share comes after the pass whole. Over slow links it can outweigh
  // the compute (PipeDream's GNMT on 128 GPUs: a stage's 0.15 s reduction beside its
  // 0.14 s of passes); without it, plans there were bounded at twice what they ran
  // (docs/planner.md, "Bounds that count the all-reduce").
  for (int s = 0; s < stages && !schedule::multiStage(traits); ++s) {
    const auto& ranks = stage_ranks[s];
    if (ranks.size() < 2) continue;
    const StageCosts& c = costs.stage(s);
    const double last_pass = c.recompute + c.backward_input + std::max(c.backward_weight, c.split_weight);
    const double steps = stepsOf(static_cast<int>(ranks.size()));
    for (int r : ranks) {
      const double hidden = last_pass / speedOf(r) * (1 - firstBucketShare(c.param_bytes)) + gradients_sent[r];
      busy[r] += steps * std::max({0.0, costs.allreduceHostSeconds(s), costs.allreduceSeconds(s) - hidden});
    }
  }
  double busiest = stage_busiest;
  for (double b : busy) busiest = std::max(busiest, b);
  for (double w : wire) busiest = std::max(busiest, w);

  if (!schedule::multiStage(traits)) busiest = std::max(busiest, pipelineBound(costs, stage_ranks, paths, waited_on));
  return busiest > 0 ? windowAllowance(plan.schedule.name) * static_cast<double>(plan.samplesPerMinibatch()) / busiest
                     : kInfinity;
}

double windowAllowance(const std::string& schedule) {
  return schedule::isAsynchronous(schedule) ? static_cast<double>(kSteadyWindow + 1) / kSteadyWindow : 1.0;
}

}  // namespace pipetrain::sim
