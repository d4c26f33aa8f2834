// The simulator's prediction for a run that just happened: the plan that ran, with each
// stage priced at its measured compute times (means over the run's steady state) and
// the links it ran over (this machine's loopback Gloo, or the network a job across hosts
// measured), fed through the same Program. Side by side with the
// measured bubbles it separates what the schedule costs from what communication and the
// framework add.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "pipetrain/job/local_cluster.h"
#include "pipetrain/plan/measured_profile.h"
#include "pipetrain/plan/plan.h"
#include "pipetrain/schedule/action.h"
#include "pipetrain/sim/evaluate.h"

namespace pipetrain::job {

struct MeasuredRun {
  const plan::Plan* plan = nullptr;           // what ran
  // Measured seconds per stage and action type (F, B, I, W, STEP): the run's
  // steady-state means (runtime::RankResult::action_seconds) of each stage's slowest
  // replica (slowestReplicaSeconds), of wall time and of the ranks' time on a core.
  plan::StageSeconds action_seconds;
  plan::StageSeconds action_cpu_seconds;
  int concurrent_ranks = 1;  // how many ranks the cores ran at once (localCluster)
  int blas_threads = 1;      // each rank's
  std::vector<int64_t> stage_output_bytes;
  std::vector<int64_t> stage_param_bytes;     // what replicas all-reduce
  std::vector<std::vector<int>> stage_preds;  // the stages each stage reads (the plan's stage DAG)
  LocalSums sums = LocalSums::kGloo;          // what summed the replicas' gradients
  // Per rank: its time inside training steps that was neither compute, waiting for
  // messages nor all-reducing, per action of its Programs (messages included): the
  // runtime's own work and its sends' (RankResult::actions_run).
  std::vector<double> framework_seconds_per_action;
  // The network between the job's hosts, where it ran across hosts and measured it
  // (LaunchedRun::hosts); null: this machine's loopback.
  const cluster::ClusterSpec* hosts = nullptr;

  // What the simulator prices each action at: its time on a core where a rank runs one
  // BLAS thread, else its wall time. An action's wall time also holds what else ran on
  // its core meanwhile: other ranks' turns where ranks outnumbered the cores (priced so,
  // fmnist-cnn's 3 ranks on 2 cores were predicted slow), and the transport's threads
  // copying messages and summing the all-reduce (both measured: docs/predictions.md, "The
  // runs people start"). The simulator prices both itself (shared cores as the launcher
  // pinned them, the routes' host costs). With several BLAS threads a rank's compute also
  // runs on threads its CPU clock does not count; such ranks keep wall times.
  const plan::StageSeconds& pricedSeconds() const {
    return blas_threads == 1 ? action_cpu_seconds : action_seconds;
  }
};

// One rank's measured seconds (of its stages only) and its compute per mini-batch, the
// same mini-batches on every rank, on one clock (runtime::RankResult's
// minibatch_busy_seconds with wall times, minibatch_busy_cpu_seconds with time on a
// core: a rank waiting its turn on a shared core is the simulator's to price).
struct RankSeconds {
  plan::StageSeconds seconds;
  std::vector<double> minibatch_busy;
};

// Each stage's seconds per action type at the pace its slowest replica set, from each
// rank's. A synchronous step waits for its slowest replica, mini-batch by mini-batch:
// - the stage's figures are those of the replica whose compute took longest (ALLREDUCE
//   left out: a faster replica waits there longer);
// - its compute is scaled by the mean over mini-batches of the replicas' slowest compute,
//   over that replica's mean: which replica lags changes from one mini-batch to the next.
// In data-parallel gpt on 2 ranks one replica's backward pass took far less than the
// other's in the same mini-batch, and priced at the replicas' mean the run's own action
// times predicted it fast; at this pace, close (docs/predictions.md, "Replicas at the
// slowest pace"). A stage on one rank keeps that rank's figures.
plan::StageSeconds slowestReplicaSeconds(const std::vector<RankSeconds>& ranks);

// Each rank's time around an action that the cluster's routes do not price: what the
// run measured per action, less its sends' host cost per action (the simulator prices
// that cost on the sender's clock; a receive's lands in the run's waits). Without it the
// simulator, fed a run's own action times, came out fast on every case of
// bench/prediction_cases.py (docs/predictions.md, "The runtime's own time"). A run's
// figure prices its own prediction (predictRun) and, learned, the next plans of its
// profile (graph::LearnedActionOverhead).
std::vector<double> runtimeSecondsPerAction(const MeasuredRun& run);

// The report and the predicted timeline of one mini-batch.
sim::Evaluation predictRun(const MeasuredRun& run);

}  // namespace pipetrain::job
