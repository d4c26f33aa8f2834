// A job that torchrun started (`torchrun --nproc-per-node N --no-python pipetrain train
// ...`), made the same job as `train --nproc N`: rank 0 decides the plan (the
// planner's, for the ranks of its host, or a checkpoint's, or the one the flags give)
// and the other ranks receive it; at the end every rank's result goes to rank 0, which
// sums up the run, prints it once and writes the outputs. They meet through torchrun's
// agent store, under keys of this start of the job (torchrun restarts every worker).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "pipetrain/job/local_launch.h"
#include "pipetrain/job/train_request.h"
#include "pipetrain/torch/transport.h"

namespace pipetrain::job {

class TorchrunJob {
 public:
  // Whether this process is a rank of a torchrun job whose agent serves the store.
  static bool here();
  explicit TorchrunJob(const runtime::Rendezvous& rendezvous);
  ~TorchrunJob();

  int rank() const;
  int worldSize() const;
  // Whether every rank runs on this host (LOCAL_WORLD_SIZE = WORLD_SIZE): the planner
  // plans the ranks as this host's.
  bool oneHost() const;

  // Rank 0: the plan (and the planner's summary) for the others, or why there is none,
  // which ends them with the same message.
  void sharePlan(const plan::Plan& plan, const json_io::Json& planner);
  void sharePlanFailure(const std::string& why);
  // The others: what rank 0 shared. It may profile and plan first: they wait up to
  // `patience`, unless torchrun ends them sooner (as it does when rank 0 fails).
  void receivePlan(TrainRequest& request, std::chrono::seconds patience);

  // Every rank gives its result; rank 0 gets everyone's, by rank (others: empty), the
  // job's wall time measured from `start`.
  LaunchedRun gatherResults(const runtime::RankResult& mine, std::chrono::steady_clock::time_point start);

 private:
  struct Store;
  runtime::Rendezvous rendezvous_;
  std::unique_ptr<Store> store_;
};

}  // namespace pipetrain::job
