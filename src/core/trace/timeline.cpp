#include "pipetrain/trace/timeline.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <limits>

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

std::vector<int> minibatchOfActions(const std::vector<TimedAction>& actions, int microbatches, int minibatches) {
  std::vector<int> of(actions.size(), -1);
  // STEP and ALLREDUCE carry micro-batch -1: they never open a mini-batch.
  auto opens = [&](const TimedAction& a, int k) { return a.action.microbatch >= k * microbatches; };
  int k = -1;
  for (std::size_t i = 0; i < actions.size(); ++i) {
    while (k + 1 < minibatches && opens(actions[i], k + 1)) ++k;
    of[i] = k;
  }
  return of;
}

std::vector<std::vector<TimedAction>> splitMinibatches(const std::vector<TimedAction>& actions, int microbatches,
                                                       int first, int minibatches) {
  std::vector<std::vector<TimedAction>> out(static_cast<std::size_t>(std::max(minibatches - first, 0)));
  const std::vector<int> of = minibatchOfActions(actions, microbatches, minibatches);
  for (std::size_t i = 0; i < actions.size(); ++i)
    if (of[i] >= first) out[static_cast<std::size_t>(of[i] - first)].push_back(actions[i]);
  return out;
}

std::vector<std::vector<TimedAction>> typicalMinibatch(
    const std::vector<std::vector<std::vector<TimedAction>>>& recent) {
  std::size_t kept = recent.empty() ? 0 : SIZE_MAX;
  for (const auto& rank : recent) kept = std::min(kept, rank.size());
  if (kept == 0) return std::vector<std::vector<TimedAction>>(recent.size());
  // The j-th of the last `kept` mini-batches, on every rank.
  auto minibatch = [&](std::size_t rank, std::size_t j) -> const std::vector<TimedAction>& {
    return recent[rank][recent[rank].size() - kept + j];
  };
  auto bounds = [&](std::size_t j) {
    double first = std::numeric_limits<double>::infinity(), last = -first;
    for (std::size_t r = 0; r < recent.size(); ++r)
      for (const TimedAction& a : minibatch(r, j)) first = std::min(first, a.start), last = std::max(last, a.end);
    return std::pair{first, last};
  };
  std::vector<std::pair<double, std::size_t>> spans;
  for (std::size_t j = 0; j < kept; ++j) {
    const auto [first, last] = bounds(j);
    spans.push_back({std::isfinite(first) ? last - first : 0, j});
  }
  // The lower median, so that of two the faster is drawn (a stall is what this avoids).
  std::nth_element(spans.begin(), spans.begin() + static_cast<long>((kept - 1) / 2), spans.end());
  const std::size_t chosen = spans[(kept - 1) / 2].second;
  const double origin = bounds(chosen).first;
  std::vector<std::vector<TimedAction>> out;
  for (std::size_t r = 0; r < recent.size(); ++r) {
    out.push_back(minibatch(r, chosen));
    for (TimedAction& a : out.back()) a.start -= origin, a.end -= origin;
  }
  return out;
}

}  // namespace pipetrain::trace
