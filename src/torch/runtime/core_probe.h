// How fast this thread's core computes now: the seconds of a fixed computation (four
// 256 x 256 single-precision matrix products, short enough to run between passes), the
// same in the profile and in a run, so that the two can be compared. One product runs
// untimed first, so that the timed ones find their operands in the core's caches: cold,
// the probe also timed whatever ran before it, which differs between a profile (a pass)
// and a run (an optimizer step); it came out 0.72-0.76 ms there against 0.65-0.69 ms
// warm (docs/predictions.md, "Per action: what a first run pays that its profile did
// not"). Time the thread spent runnable while other threads held every core is left out:
// ranks that outnumber the cores take turns, and that turn-taking is priced on its own
// (util/core_time.h), not as a slow core.
//
// NOTE(core-probe): on this project's VMs a core's speed moves on its own: two processes
// pinned to the two cores saw one core fall to half the other's speed or less for seconds
// (measured: docs/profiling.md#cores-that-run-at-different-speeds). Two uses:
//  - a profile's shares time at once on different cores, and a share timed on the slower
//    core looks costlier than the same layers timed on the other; the partitioner, which
//    believes the figures, then gives the faster-timed share's layers to fewer ranks'
//    worth of time. Each share probes its core after every timed pass, and the merge
//    brings the shares to the slower core's speed (plan::mergeProfileShares);
//  - a run probes its cores too (RankResult::probe_seconds), and the summary says how
//    their speed compared with the profile's, and what the plan predicts at the run's
//    speed (docs/profiling.md#cores-that-run-at-different-speeds).
#pragma once

namespace pipetrain::runtime {

double coreProbeSeconds();

}  // namespace pipetrain::runtime
