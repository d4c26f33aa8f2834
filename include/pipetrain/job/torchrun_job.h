// A job that torchrun started (`torchrun --nproc-per-node N --no-python pipetrain train
// ...`), made the same job as `train --nproc N`: rank 0 decides the plan (the
// planner's, for the ranks of its host or for the network between the job's hosts, or a
// checkpoint's, or the one the flags give) and the other ranks receive it; at the end
// every rank's result goes to rank 0, which sums up the run, prints it once and writes
// the outputs. They meet through torchrun's agent store, under keys of this start of the
// job (torchrun restarts every worker). Ranks started by hand (RANK, WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT set, no agent) run the same job: rank 0 serves the store
// at MASTER_PORT, as the agent would.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "pipetrain/job/console.h"
#include "pipetrain/job/host_network.h"
#include "pipetrain/job/local_launch.h"
#include "pipetrain/job/train_request.h"
#include "pipetrain/torch/transport.h"

namespace pipetrain::job {

class TorchrunJob {
 public:
  // Whether this process is a rank of a torchrun job whose agent serves the store.
  static bool here();
  // Whether this process is one of several ranks started by hand: RANK and WORLD_SIZE
  // (above 1) set, and no agent serving a store.
  static bool startedByHand();
  // Where no agent serves the store, rank 0 serves it, and the rest of this process
  // (its transports, the ranks it trains as) then meets there as under an agent.
  explicit TorchrunJob(const runtime::Rendezvous& rendezvous);
  ~TorchrunJob();

  int rank() const;
  int worldSize() const;
  // The job's rendezvous, meeting in the store this job serves or reaches.
  const runtime::Rendezvous& rendezvous() const { return rendezvous_; }
  // Every rank: where it runs, for rank 0. Rank 0: every rank's, by rank, once all have
  // said (waiting up to `patience`).
  void sharePlace(const RankPlace& mine);
  std::vector<RankPlace> places(std::chrono::seconds patience);

  // Rank 0 of a job across hosts, before it plans: the network between the hosts of
  // `places` (this job's), from the cache where an earlier job on the same hosts
  // measured it (unless `remeasure`), else measured now by every rank (host_network.h),
  // summing over `wire` on the devices of `device_spec`. Says what it found.
  cluster::ClusterSpec networkOfHosts(const std::vector<RankPlace>& places, const std::string& wire,
                                      const std::string& device_spec, bool remeasure, const Say& say);
  // The other ranks: whether rank 0 has them measure the network (then they call
  // measureNetwork), waiting up to `patience`; a plan shared without it says no.
  bool networkMeasurementAnnounced(std::chrono::seconds patience);

  // Rank 0: the plan (and the planner's summary) for the others, with the rank of the
  // plan each process runs by its job rank where they differ (RankLayout::plan_rank;
  // empty: its own), or why there is none, which ends them with the same message.
  void sharePlan(const plan::Plan& plan, const std::optional<report::PlannerRecord>& planner,
                 const std::vector<int>& plan_ranks);
  void sharePlanFailure(const std::string& why);
  // The others: what rank 0 shared. It may profile and plan first: they wait up to
  // `patience`, unless torchrun ends them sooner (as it does when rank 0 fails).
  void receivePlan(TrainRequest& request, std::chrono::seconds patience);

  // Every rank gives its result, as the plan's rank `plan_rank`; rank 0 gets everyone's,
  // by the plan's rank (others: empty), the job's wall time measured from `start`.
  LaunchedRun gatherResults(const runtime::RankResult& mine, int plan_rank,
                            std::chrono::steady_clock::time_point start);

 private:
  struct Store;
  runtime::Rendezvous rendezvous_;
  std::unique_ptr<Store> store_;
  bool network_announced_ = false;
  // Rank 0: tells the others whether they measure the network, once.
  void announceNetworkMeasurement(bool measure);
};

}  // namespace pipetrain::job
