// How long a thread was ready to run while other threads held every core.
#pragma once

namespace pipetrain::util {

// Seconds the calling thread has spent runnable but not running since it started: the
// time it lost to other threads and processes on the same cores (Linux reports it in
// /proc/thread-self/schedstat). Negative where the kernel does not say (not Linux, or a
// kernel without scheduler statistics).
//
// Why: ranks that outnumber the cores take turns on them, and a pass that loses its core
// for a scheduler slice stalls every rank downstream of it. The simulator gives every
// rank a core of its own, so this is the time it cannot predict (docs/profiling.md).
double threadCoreWaitSeconds();

}  // namespace pipetrain::util
