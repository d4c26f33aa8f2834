// How a thread's time divided between running on a core and waiting for one.
#pragma once

namespace pipetrain::util {

struct ThreadCoreTime {
  double running_seconds = -1;  // on a core
  double waiting_seconds = -1;  // runnable, but other threads held every core
};

// The calling thread's times since it started, as Linux reports them in
// /proc/thread-self/schedstat; both -1 where the kernel does not say (not Linux, or a
// kernel without scheduler statistics).
//
// Why: ranks that outnumber the cores take turns on them, and a pass that loses its core
// for a scheduler slice stalls every rank downstream of it. The waiting time is what that
// costs a rank; the running time is the work it did, to set beside the profile's, which
// times each layer on a core of its own (docs/profiling.md).
ThreadCoreTime threadCoreTime();

// The calling thread's time on a core since it started, from the thread's CPU clock:
// the running time above, cheap enough to read around every action a rank runs (a
// system call, not a file), so that an action's work can be told from the time it
// waited for its core.
double threadCpuSeconds();

}  // namespace pipetrain::util
