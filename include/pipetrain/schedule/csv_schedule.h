// Schedules users write: the per-rank CSV of PyTorch pipelining (row r = rank r, e.g.
// "0F0,0F1,0B0,0B1"), in either of PyTorch's notations for the backward pass, with or
// without its communication actions; and how such a schedule compares with pipetrain's
// own generators.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "pipetrain/schedule/program.h"
#include "pipetrain/schedule/schedules.h"

namespace pipetrain::schedule {

// How a file names the backward passes. Read off the file: `BW`, or a B and a W of the
// same stage and micro-batch, is the older notation; a file mixing I with either is refused.
enum class BackwardNotation {
  kCurrent,  // PyTorch's and pipetrain's: B the full backward, I input gradients, W weight gradients
  kOlder,    // PyTorch's older one (its ZB1P test files): B input gradients, W weight gradients,
             // BW the full backward
};

struct CsvSchedule {
  // Lowered, one mini-batch, every action reading version 0, each rank ending with a
  // STEP per stage. Where the file lists its own communication, its sends stay where it
  // put them; its receives wait right before the action that needs the data (where a
  // runtime waits on a receive it posted earlier, as PyTorch's and pipetrain's do).
  Program program;
  BackwardNotation notation = BackwardNotation::kCurrent;
  bool gave_communication = false;  // the file lists SEND/RECV actions (checked against lowering)
  int late_sends = 0;               // of those, sends posted after other work of their rank
                                    // rather than right after the action that makes their data
  // Where each action of the file was written: "line L, column C".
  std::map<std::tuple<int, int, int, int>, std::string> written_at;  // (type, stage, micro-batch, peer)

  std::string where(const Action& action) const;  // "" for actions the file did not write
};

// Reads a CSV schedule. Stages form `dag` (a chain when empty). Throws Error naming the
// file, line and column of what is wrong: a cell that does not parse, an action written
// twice, a stage on two ranks, notations mixed, or communication that differs from what
// the compute actions need (a message missing or extra, a receive after the action that
// needs it, a send before the action that makes its data).
CsvSchedule readCsvSchedule(const std::string& csv_text, const std::string& origin, const StageDag& dag = {});
inline Program programFromCsv(const std::string& csv_text, const std::string& origin, const StageDag& dag = {}) {
  return readCsvSchedule(csv_text, origin, dag).program;
}

// validate(schedule.program) with the file position of the action at fault in the message.
void validateCsvSchedule(const CsvSchedule& schedule);

// How a Program's compute order compares with one of pipetrain's synchronous generators
// run on the same stages, placement and micro-batches.
struct GeneratorMatch {
  std::string name;
  int identical_ranks = 0;       // ranks whose compute actions come in the same order
  int ranks = 0;
  std::string first_difference;  // "" when identical: the first rank that differs, and how
};
// The closest of the generators that can build this shape (most ranks identical, then the
// longest common prefix), or nullopt when none can.
std::optional<GeneratorMatch> closestGenerator(const Program& program);

}  // namespace pipetrain::schedule
