#include "pipetrain/job/train_request.h"

#include <algorithm>
#include <thread>

namespace pipetrain::job {

int TrainRequest::localCores() const {
  return cores > 0 ? cores : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int TrainRequest::blasThreadsPerRank() const {
  if (config.threads > 0) return config.threads;
  return std::max(1, localCores() / (local_ranks > 0 ? local_ranks : nproc));
}

}  // namespace pipetrain::job
