// Action: one step of one rank's schedule, with a text form that round-trips.
//
// Text form (PyTorch pipelining's, extended): "<stage><TYPE><microbatch>" such as
// "2F0", "1B3", "0W5"; communication names the stage on the other side after '>'
// (send) or '<' (receive): "0SEND_F1>1", "1RECV_F1<0" (without it, the neighbour
// stage is assumed); STEP and ALLREDUCE have no micro-batch: "0STEP", "3ALLREDUCE".
// A weight version follows as "v<N>": "1F5v2" reads version 2, "0STEPv3" creates it.
// An overlapped pair (DualPipe's F&B: a forward of one micro-batch computed together with
// a backward of another) is two actions, the F flagged `overlap_next`; lists write the
// pair in PyTorch's form "(0F3;1B2)OVERLAP_F_B" (toStrings / parseActions).
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace pipetrain::schedule {

enum class ActionType : uint8_t {
  F,          // forward of one micro-batch through one stage
  B,          // full backward (input and weight gradients)
  I,          // backward for inputs only (zero-bubble split)
  W,          // backward for weights only (after I)
  SEND_F,     // send an activation to a consumer stage
  RECV_F,     // wait for an activation from a producer stage
  SEND_B,     // send an input gradient to a producer stage
  RECV_B,     // wait for a gradient from a consumer stage
  STEP,       // optimizer step: creates a new weight version of the stage
  ALLREDUCE,  // sum gradients across the replicas of the stage
  kCount
};
constexpr int kNumActionTypes = static_cast<int>(ActionType::kCount);

const char* name(ActionType type);
bool isCompute(ActionType type);   // F, B, I, W
bool isBackward(ActionType type);  // B, I, W: each one call into autograd's engine
bool isComm(ActionType type);      // SEND_*, RECV_*
bool isSend(ActionType type);      // SEND_F, SEND_B

struct Action {
  ActionType type = ActionType::F;
  int stage = 0;
  int microbatch = -1;  // -1 for STEP and ALLREDUCE
  int version = -1;     // F/B/I/W: the weight version read; STEP: the version created
  int peer_stage = -1;  // SEND/RECV: the stage on the other side
  bool overlap_next = false;  // F only: computed together with the B that follows it

  bool operator==(const Action& o) const {
    return type == o.type && stage == o.stage && microbatch == o.microbatch &&
           version == o.version && peer_stage == o.peer_stage && overlap_next == o.overlap_next;
  }
  bool operator!=(const Action& o) const { return !(*this == o); }
};

// The message a SEND_F, SEND_B, RECV_F or RECV_B action moves, named by the edge it
// crosses, the same on its send and its receive: (backward?, producer stage, consumer
// stage, micro-batch). An activation leaves the producer, a gradient the consumer.
using MessageKey = std::tuple<bool, int, int, int>;
MessageKey messageOf(const Action& message);

// Shorthands for building Programs.
inline Action computeAction(ActionType type, int stage, int microbatch, int version) {
  return {type, stage, microbatch, version, -1};
}
inline Action commAction(ActionType type, int stage, int microbatch, int peer_stage) {
  return {type, stage, microbatch, -1, peer_stage};
}
inline Action stepAction(int stage, int new_version) { return {ActionType::STEP, stage, -1, new_version, -1}; }
inline Action allReduceAction(int stage) { return {ActionType::ALLREDUCE, stage, -1, -1, -1}; }

// One action's text; an overlapped pair's F and B are written separately.
std::string toString(const Action& action);
// Throws Error("cannot parse action \"...\": ...") on malformed text.
Action parseAction(const std::string& text);

// A list's text, one string per action except that an overlapped pair is one string,
// "(0F3;1B2)OVERLAP_F_B".
std::vector<std::string> toStrings(const std::vector<Action>& actions);
// One string of a list: one action, or the two of an overlapped pair.
std::vector<Action> parseActions(const std::string& text);
// Whether position i of a list is the B half of an overlapped pair.
inline bool overlapsPrevious(const std::vector<Action>& actions, std::size_t i) {
  return i > 0 && actions[i - 1].overlap_next;
}

}  // namespace pipetrain::schedule
