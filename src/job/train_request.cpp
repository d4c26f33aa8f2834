#include "pipetrain/job/train_request.h"

#include <algorithm>
#include <thread>

namespace pipetrain::job {

int TrainRequest::localCores() const {
  return ranks.cores > 0 ? ranks.cores : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int TrainRequest::blasThreadsPerRank() const {
  if (config.threads > 0) return config.threads;
  return std::max(1, localCores() / (ranks.local_ranks > 0 ? ranks.local_ranks : ranks.nproc));
}

}  // namespace pipetrain::job
