// This process's memory as the kernel counts it: what a user sees in `top`, and what the
// planner's memory prediction is checked against on the CPU.
#pragma once

#include <cstdint>

namespace pipetrain::util {

// The resident set now (/proc/self/statm); 0 where the kernel does not say.
int64_t residentBytes();
// The largest resident set the process has had (getrusage's ru_maxrss).
int64_t peakResidentBytes();

}  // namespace pipetrain::util
