// Schedule generators: each writes a compute-only Program (F/B/I/W and STEP, with the
// weight version every action reads) for a DAG of stages, one rank per stage (or, for
// interleaved, one rank per `chunks` stages). Replication and communication are added
// by separate passes (replicate.h, lower.h); buildProgram() runs the whole chain.
//
// Schedules (p stages, m micro-batches per mini-batch, K mini-batches):
//   gpipe       all F, all B, flush, STEP                       versions: 1
//   1f1b        PipeDream-Flush / DAPPLE: warm-up, 1F1B, drain     versions: 1
//   pipedream   async 1F1B, STEP after every B, weight stashing    versions: p - r
//               (vertical_sync: every stage reads the input stage's version)
//   2bw         async 1F1B, STEP every m micro-batches, mini-batch k reads version k-1
//   pipemare    async 1F1B, one weight copy: B reads the current weights
//   interleaved Megatron's interleaved 1F1B, `chunks` stages per rank, flush
//   zb-h1       zero-bubble H1: backward split into I and W; stage s defers its W
//               passes by s (its distance from the input), which fills the drain
//               bubble without holding more than p micro-batches of activations
#pragma once

#include <string>
#include <vector>

#include "pipetrain/schedule/program.h"

namespace pipetrain::schedule {

struct ScheduleSpec {
  std::string name = "1f1b";
  int microbatches = 1;     // per mini-batch
  int minibatches = 1;      // how many mini-batches the Program runs
  int chunks = 1;           // interleaved only: stages per rank
  bool vertical_sync = false;  // pipedream only
};

// The stages and their dependencies; a chain unless a graph plan says otherwise.
struct StageDag {
  std::vector<std::vector<int>> preds;
  std::vector<std::vector<int>> succs;
  int size() const { return static_cast<int>(preds.size()); }
};
StageDag chainDag(int stages);

const std::vector<std::string>& scheduleNames();
// True for schedules whose training semantics differ from synchronous SGD.
bool isAsynchronous(const std::string& name);
// Throws Error listing the known names.
void checkScheduleName(const std::string& name);

// Compute-only Program. Throws Error when the schedule cannot use these numbers
// (e.g. interleaved needs micro-batches divisible by the ranks; 2bw needs m >= p).
Program generate(const ScheduleSpec& spec, const StageDag& dag);

// generate + replicate + lower: a Program ready to validate and execute.
// `replicas[s]` = how many ranks run stage s (empty = one each).
Program buildProgram(const ScheduleSpec& spec, const StageDag& dag,
                     const std::vector<int>& replicas = {});

}  // namespace pipetrain::schedule
