// The local launcher behind `pipetrain train --nproc N`: starts N copies of this
// program as ranks (with torchrun's environment variables), relays their progress,
// and ends the whole job, naming the rank, as soon as any rank fails.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace pipetrain::job {

// A rank's last line to the launcher starts with this; the launcher keeps what follows
// (rank_report.h, rankResultToJson).
inline constexpr const char* kResultPrefix = "RESULT ";

// A process this program starts for a part of its job (a rank: `train`; a profiling
// process: `profile`) reads that part from a file named by kJobOption, and reports its
// progress on stderr under kProgressOption. The CLI declares both options by these names.
inline constexpr const char* kJobOption = "--job";
inline constexpr const char* kProgressOption = "--progress";
std::vector<std::string> childCommand(const std::string& subcommand, const std::string& job_file,
                                      bool progress = false);

struct RankOutput {
  int rank = 0;
  std::string result_json;  // the rank's RESULT line, empty if it never printed one
};

// Runs `argv` (this program's arguments) as `nproc` ranks. `on_line(rank, line)` gets
// every PROGRESS line. Returns the ranks' outputs if all exit cleanly; otherwise throws
// Error naming the first rank that failed (after stopping the others).
// `blas_threads_per_rank`: the BLAS threads each rank gets (its share of the cores).
// `concurrent_ranks` > 0: how many ranks the cores run at once; where `nproc` exceeds
// it, rank r is pinned to the cores of slot cluster::sharedCoreOf(r, concurrent_ranks)
// (blas_threads_per_rank of this process's allowed CPUs each), the placement the
// simulator prices; left to the kernel, the ranks waited for cores longer than that
// (docs/profiling.md). Such ranks' Gloo polling threads also get the lowest priority
// (PIPETRAIN_POLLING_NICE, unless set: util/thread_priority.h). 0: never pinned.
std::vector<RankOutput> launchLocal(const std::vector<std::string>& argv, int nproc, int blas_threads_per_rank,
                                    const std::function<void(int, const std::string&)>& on_line,
                                    int concurrent_ranks = 0);

// Runs each command line (this program's arguments) as a process with the thread
// settings of a rank that has `blas_threads`, all at once, and waits for them all. Their
// standard output is discarded.
// Throws Error if one fails (its messages went to this process's stderr) or stays
// stopped (SIGSTOP) for longer than `stopped_limit`; the others are then killed.
void runLikeRanks(const std::vector<std::vector<std::string>>& commands, int blas_threads,
                  std::chrono::milliseconds stopped_limit);

}  // namespace pipetrain::job
