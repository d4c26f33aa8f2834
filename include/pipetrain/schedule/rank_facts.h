// What an interpreter of one rank's part of a Program needs to know beyond the actions
// themselves, derived once from the whole Program and resolved per position: each
// message's peer, edge, tag and mailbox slot, the slots a pass reads its inputs from,
// when a stashed weight version is created and dropped, where the gradients of a
// replicated stage are complete, where a mini-batch ends, and when a send is certain to
// have been delivered. (The order in which each pair of ranks posts its messages, which
// NCCL needs, is program_check.h's validateInOrderDelivery.) The runtime's executor
// reads these and decides nothing of its own about the Program; the core's tests check
// them on every generator.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
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

// A message a SEND or RECV moves, resolved for the rank that moves it.
struct MessageFacts {
  int peer = -1;                     // the rank at the other end
  int producer = -1, consumer = -1;  // the stage DAG's edge it crosses
  bool gradient = false;             // the consumer's gradient back to the producer
  uint32_t tag = 0;                  // messageTag()
  int slot = -1;                     // RECV: the rank's mailbox slot it arrives in, 0..RankFacts::slots
};

// One position of the rank's action list, resolved.
struct PositionFacts {
  std::optional<MessageFacts> message;  // SEND_F, SEND_B, RECV_F, RECV_B
  // F: per producer of its stage (Program::stage_preds order), the mailbox slot its input
  // arrives in; B and I: per consumer (stage_succs order), the slot its output's gradient
  // arrives in. -1 where that stage's micro-batch runs on this rank.
  std::vector<int> input_slots;
  bool stash_at_step = false;       // STEP: a later action still reads the replaced version (stash it)
  // (stage, version) of the stashed versions nothing reads after this action (drop them;
  // program_memory.h's retirements, the accounting's rule).
  std::vector<std::pair<int, int>> retire;
  int completes_gradients_of = -1;  // B or W: the stage whose gradients it completes before its ALLREDUCE
  int minibatch_done = -1;          // the rank's last action of this mini-batch
  // RECV: positions of this rank's SENDs that are certainly delivered once this message
  // has arrived: the peer sent it after receiving them. A transport that says a send is
  // done only when waited on (Gloo) may then wait without deadlock, and a rank need not
  // hold every payload of a long Program until its end.
  std::vector<int> sends_delivered;
};

struct RankFacts {
  int rank = 0;
  std::vector<PositionFacts> positions;  // one per action of the rank's list
  int slots = 0;                         // mailbox slots: the messages the rank receives
  // The ranks this rank sends to or receives from, in increasing order.
  std::vector<int> peers;
  // (stage, micro-batch) -> the weight version its forward pass reads.
  std::map<std::pair<int, int>, int> forward_version;
  // Stages whose backward pass runs as I then W.
  std::set<int> split_stages;
  StepCombination steps;           // loss scale and gradient factors (staleness.h)
  std::vector<int> stage_delays;   // per stage, what T1 and T2 are tuned for
};

// Only what the rank's messages need: positions' messages and input slots, slots and
// peers (a forward-only Program's, which has no steps to stash or gradients to arm).
// REQUIRES: program validated, 0 <= rank < program.numRanks().
RankFacts messageFacts(const Program& program, int rank);

// REQUIRES: program validated, 0 <= rank < program.numRanks().
RankFacts rankFacts(const Program& program, int rank);

// Whether, on `rank`, the stages in `stages` step equally often and the first of each
// round of their STEPs comes after every B, I, W and ALLREDUCE of all of them before
// their own STEP of that round: a gradient those stages share (tied weights,
// runtime/tied_gradients.h) is then complete when the first of them steps. True of
// every synchronous generator, for any set of a rank's stages.
bool stepsFollowAllGradients(const Program& program, int rank, const std::set<int>& stages);

}  // namespace pipetrain::schedule
