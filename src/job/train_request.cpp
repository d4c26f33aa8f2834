#include "pipetrain/job/train_request.h"

#include <algorithm>
#include <thread>

namespace pipetrain::job {

int TrainRequest::localCores() const {
  return cores > 0 ? cores : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int TrainRequest::blasThreadsPerRank() const { return std::max(1, localCores() / nproc); }

}  // namespace pipetrain::job
