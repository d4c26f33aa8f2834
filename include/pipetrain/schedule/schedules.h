// Schedule generators: each writes a compute-only Program (F/B/I/W, ALLREDUCE and STEP,
// with the weight version every action reads) for a DAG of stages, one rank per stage
// replica (or, for interleaved, one rank per `chunks` stages). Lowering to
// communication is a separate pass (passes.h); buildProgram() runs both. The properties
// of each schedule are in schedule_traits.h.
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
//   zb-h2       zero-bubble H2: up to 2p-1 micro-batches in flight, W fills every bubble
//   zb-v        zero-bubble V: two stages per rank in a V, 1F1B's activation memory
//   dualpipev   DeepSeek's DualPipeV: a V of two stages per rank, a forward and a
//               backward overlapped
// (schedule_traits.h holds each one's properties, from one table.)
//
// Replicated stages (c replicas): micro-batch j runs on replica j mod c, and every
// replica runs its own copy of the stage's order over its own micro-batches (its own
// warm-up and steady state, as PipeDream's 1F1B-RR does); an ALLREDUCE precedes every
// STEP, so the replicas step on the summed gradients of the same micro-batches. A 1F1B
// warm-up never runs further ahead (in the stage's micro-batches, all replicas
// together) than its producers' do, so replica counts that differ between neighbours
// never deadlock.
#pragma once

#include <string>
#include <vector>

#include "pipetrain/schedule/program.h"
#include "pipetrain/schedule/schedule_traits.h"

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
// Stages on the DAG's longest path: a chain's length, a stage graph's depth.
int pipelineDepth(const StageDag& dag);
// The most micro-batches a replica of each stage forwards before its first backward
// pass, and so holds at once, in mini-batches of `microbatches` (an asynchronous
// stream's across them), under a schedule of one stage per rank
// (`replicas[s]` ranks run stage s): 1F1B's warm-up and one where the generator runs
// 1F1B's order, else ScheduleTraits' bound on the pipeline's depth.
std::vector<int> forwardsBeforeFirstBackward(const std::string& schedule, const StageDag& dag,
                                             const std::vector<int>& replicas, int microbatches);

// Compute-only Program. `replicas[s]` = ranks running stage s (empty = one each); ranks
// are numbered stage by stage, replica by replica. Throws Error when the schedule cannot
// use these numbers (e.g. interleaved needs micro-batches divisible by the ranks; 2bw
// needs m >= p; a stage's replicas need m >= r, and under pipedream r | m: replicasCanSplit).
Program generate(const ScheduleSpec& spec, const StageDag& dag, const std::vector<int>& replicas = {});

// generate + lower: a Program ready to validate and execute.
Program buildProgram(const ScheduleSpec& spec, const StageDag& dag, const std::vector<int>& replicas = {});

}  // namespace pipetrain::schedule
