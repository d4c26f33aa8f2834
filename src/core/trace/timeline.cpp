#include "pipetrain/trace/timeline.h"

#include <algorithm>
#include <cassert>

namespace pipetrain::trace {

double Timeline::makespan() const {
  double end = 0;
  for (const auto& rank : ranks)
    for (const TimedAction& a : rank) end = std::max(end, a.end);
  // A message still in flight after the last compute (e.g. to a rank that only
  // receives) still belongs to the run.
  for (const Transfer& t : transfers) end = std::max(end, t.end);
  return end;
}

double Timeline::busySeconds(int rank) const {
  assert(rank >= 0 && rank < numRanks());
  double busy = 0;
  for (const TimedAction& a : ranks[static_cast<std::size_t>(rank)]) {
    const schedule::ActionType t = a.action.type;
    // ALLREDUCE is communication the rank waits on, not useful work: counting it
    // would hide the cost of data parallelism in the utilisation figures.
    if (schedule::isCompute(t) || t == schedule::ActionType::STEP) busy += a.end - a.start;
  }
  return busy;
}

}  // namespace pipetrain::trace
