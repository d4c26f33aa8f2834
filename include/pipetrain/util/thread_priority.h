// Threads a library starts for us, given a lower scheduling priority than ours.
#pragma once

#include <functional>

namespace pipetrain::util {

// Runs `start`, then gives every thread of this process that appeared meanwhile the
// nice value `nice` (Linux: threads have their own; setpriority on each thread id).
// Returns how many threads it lowered; 0 where the process's threads cannot be listed.
//
// Why: Gloo's TCP device polls its sockets on a thread of its own, and it spins where a
// message's bytes have arrived while the training thread holds that peer's lock
// (gloo::transport::tcp::Pair::handleEvents takes it with try_lock and returns to
// epoll_wait, whose level-triggered event returns at once). A rank's threads share
// its core: on 3 ranks over 2 cores, rank 0's polling thread took 10-15% of the core
// its training thread needed (docs/runtime.md#the-transports-polling-thread).
int lowerPriorityOfThreadsStartedBy(const std::function<void()>& start, int nice);

// The lowest priority: the nice value `train`'s launcher sets for Gloo's polling threads
// (PIPETRAIN_POLLING_NICE, read by the Gloo transport: 0 where unset, the training
// thread's own) where ranks outnumber the cores, unless the variable is set. A spinning
// polling thread then takes a core only where the ranks' training threads leave it idle.
// Where each rank has cores of its own, the lowest priority made no difference beyond
// this machine's noise (bench/polling_priority.py).
constexpr int kPollingThreadNice = 19;

}  // namespace pipetrain::util
