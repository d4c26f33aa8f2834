// What an interpreter of one rank's part of a Program needs to know beyond the actions
// themselves, derived once from the whole Program: the tag each message has, when a
// stashed weight version is created and dropped, where the gradients of a replicated
// stage are complete, where a mini-batch ends, and when a send is certain to have been
// delivered. (A message's other rank is Program::rankOf; the order in which each pair
// of ranks posts its messages, which NCCL needs, is program_check.h's
// validateInOrderDelivery.) The runtime's executor reads these and decides nothing of
// its own about the Program; the core's tests check them on every generator.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "pipetrain/schedule/program.h"
#include "pipetrain/schedule/program_memory.h"
#include "pipetrain/schedule/staleness.h"

namespace pipetrain::schedule {

// Tags below this number name a Program's messages; a transport keeps those above for
// its own (barriers, clocks). INT32_MAX is Gloo's largest tag.
inline constexpr uint32_t kMessageTags = 0x7fffff00u;

// The tag a message's sender and receiver both use: one per edge of the stage DAG,
// direction and micro-batch. Throws Error where the Program has more messages than tags.
uint32_t messageTag(const Program& program, bool backward, int producer, int consumer, int microbatch);
// The tag of the message a SEND_F, SEND_B, RECV_F or RECV_B action moves.
uint32_t messageTag(const Program& program, const Action& message);

struct RankFacts {
  int rank = 0;
  // Where each stashed version stops being read (program_memory.h), by position.
  std::vector<Retirement> retirements;
  // Per position: a STEP whose replaced version a later action still reads (stash it).
  std::vector<char> stash_at_step;
  // (stage, micro-batch) -> the weight version its forward pass reads.
  std::map<std::pair<int, int>, int> forward_version;
  // Stages whose backward pass runs as I then W.
  std::set<int> split_stages;
  // Position of the B or W that completes a stage's gradients before its ALLREDUCE -> stage.
  std::map<int, int> completes_gradients_at;
  // Position of the rank's last action of a mini-batch -> that mini-batch.
  std::map<int, int> minibatch_done_at;
  // RECV position -> positions of this rank's SENDs that are certainly delivered once
  // that message has arrived: the peer sent it after receiving them. A transport that
  // says a send is done only when waited on (Gloo) may then wait without deadlock,
  // and a rank need not hold every payload of a long Program until its end.
  std::map<int, std::vector<int>> sends_delivered_at;
  // The ranks this rank sends to or receives from, in increasing order.
  std::vector<int> peers;
  StepCombination steps;           // loss scale and gradient factors (staleness.h)
  std::vector<int> stage_delays;   // per stage, what T1 and T2 are tuned for
};

// REQUIRES: program validated, 0 <= rank < program.numRanks().
RankFacts rankFacts(const Program& program, int rank);

// Whether, on `rank`, the stages in `stages` step equally often and the first of each
// round of their STEPs comes after every B, I, W and ALLREDUCE of all of them before
// their own STEP of that round: a gradient those stages share (tied weights,
// runtime/tied_gradients.h) is then complete when the first of them steps. True of
// every synchronous generator, for any set of a rank's stages.
bool stepsFollowAllGradients(const Program& program, int rank, const std::set<int>& stages);

}  // namespace pipetrain::schedule
