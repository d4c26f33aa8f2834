// Elapsed time, one definition for every place that times itself.
#pragma once

#include <chrono>

namespace pipetrain {

inline double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace pipetrain
