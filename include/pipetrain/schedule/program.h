// Program: a whole schedule as data, one ordered action list per rank.
//
// Generators produce it, lowering adds communication to it, the validator checks it,
// and both executors (simulator and runtime) only interpret it: weight versions and
// where they are created (STEP) are in the actions, so executors need no knowledge of
// which schedule produced the Program.
#pragma once

#include <cassert>
#include <cstddef>
#include <string>
#include <vector>

#include "pipetrain/schedule/action.h"

namespace pipetrain::schedule {

// Whether a backward pass must read the same weights its forward pass read.
// kStashed: yes (synchronous schedules, PipeDream stashing, 2BW): B.version == F.version.
// kLatest: no, backward reads whatever is current (PipeMare: one weight copy).
enum class BackwardWeights { kStashed, kLatest };

struct Program {
  std::string schedule;        // generator name, or the file of a user's CSV schedule
  int num_stages = 0;          // pipeline stages (virtual stages for interleaved)
  int microbatches = 0;        // per mini-batch
  int minibatches = 1;         // micro-batch indices run 0 .. microbatches*minibatches-1
  BackwardWeights backward_weights = BackwardWeights::kStashed;
  // replicas[s] = ranks running stage s; micro-batch j runs on replicas[s][j % size].
  std::vector<std::vector<int>> stage_ranks;
  // stage DAG (a chain unless a graph plan says otherwise)
  std::vector<std::vector<int>> stage_preds;
  std::vector<std::vector<int>> stage_succs;
  std::vector<std::vector<Action>> ranks;

  int numRanks() const { return static_cast<int>(ranks.size()); }
  int totalMicrobatches() const { return microbatches * minibatches; }
  int rankOf(int stage, int microbatch) const {
    const auto& replicas = stage_ranks[stage];
    assert(!replicas.empty());
    return replicas[static_cast<std::size_t>(microbatch) % replicas.size()];
  }
  bool isLastStage(int stage) const { return stage_succs[stage].empty(); }
  bool isFirstStage(int stage) const { return stage_preds[stage].empty(); }
  // Stages this rank runs, in increasing order.
  std::vector<int> stagesOfRank(int rank) const;
};

// A dense number for every message a Program can send: (edge of the stage DAG,
// direction, micro-batch). Tables indexed by message are then vectors, not hash maps:
// the validator and the simulator look one up per action.
class MessageIndex {
 public:
  explicit MessageIndex(const Program& program);
  std::size_t size() const { return 2 * edges_ * total_; }
  // REQUIRES: producer -> consumer is an edge of the DAG, the micro-batch in range.
  std::size_t of(bool backward, int producer, int consumer, int microbatch) const;
  // The message a SEND_F, RECV_F, SEND_B or RECV_B action moves.
  std::size_t of(const Action& message) const;

 private:
  const Program& program_;
  std::vector<std::size_t> first_edge_;  // per producer stage: the number of its first out-edge
  std::size_t edges_ = 0, total_ = 0;
};

// Sets the stage DAG to a chain 0 -> 1 -> ... -> n-1.
void setChain(Program& program);

// Text form: one line per rank, "rank 0: 0F0 0F1 0B0 ...".
std::string toText(const Program& program);

// Per-rank CSV of compute actions, the format PyTorch pipelining users know: row r is
// rank r's actions, comma-separated ("0F0,0F1,0B0"). Communication is not written;
// lowering adds it back when the CSV is read.
std::string toCsv(const Program& program);

}  // namespace pipetrain::schedule
