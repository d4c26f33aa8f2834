#include "pipetrain/schedule/schedule_traits.h"

#include <algorithm>
#include <array>

#include "pipetrain/util/error.h"

namespace pipetrain::schedule {
namespace {

using K = ScheduleKind;
constexpr auto kStashed = BackwardWeights::kStashed;
constexpr auto kLatest = BackwardWeights::kLatest;
constexpr auto kMini = StepRule::kPerMinibatch;
constexpr auto kMicro = StepRule::kPerMicrobatch;

// kind, name, summary, async, multi_chunk, split_backward, backward weights, step, replicable,
// all forwards first, fixed weight versions
constexpr std::array<ScheduleTraits, kNumSchedules> kTable = {{
    {K::kGpipe, "gpipe", "all forwards, all backwards, flush", false, false, false, kStashed, kMini, true, true, 1},
    {K::k1F1B, "1f1b", "PipeDream-Flush / DAPPLE: warm-up, one forward one backward, drain", false, false, false,
     kStashed, kMini, true, false, 1},
    {K::kPipeDream, "pipedream", "asynchronous 1F1B, a step after every backward, weight stashing", true, false, false,
     kStashed, kMicro, true, false, 0},
    {K::k2BW, "2bw", "asynchronous 1F1B, two weight versions, a step per mini-batch", true, false, false, kStashed,
     kMini, true, false, 2},
    {K::kPipeMare, "pipemare", "asynchronous 1F1B, one weight copy: backward reads the current weights", true, false,
     false, kLatest, kMini, true, false, 1},
    {K::kInterleaved, "interleaved", "Megatron's interleaved 1F1B, several stages per rank", false, true, false,
     kStashed, kMini, false, false, 1},
    {K::kZbH1, "zb-h1", "zero bubble H1: backward split into input and weight passes", false, false, true, kStashed,
     kMini, true, false, 1},
}};

constexpr bool tableInEnumOrder() {
  for (int i = 0; i < kNumSchedules; ++i)
    if (static_cast<int>(kTable[i].kind) != i) return false;
  return true;
}
static_assert(tableInEnumOrder(), "kTable must list every ScheduleKind once, in enum order");

}  // namespace

const ScheduleTraits& traits(ScheduleKind kind) { return kTable.at(static_cast<int>(kind)); }

const ScheduleTraits& traits(const std::string& name) {
  for (const ScheduleTraits& t : kTable)
    if (name == t.name) return t;
  std::string list;
  for (const ScheduleTraits& t : kTable) list += (list.empty() ? "" : ", ") + std::string(t.name);
  throw Error("unknown schedule \"" + name + "\" (known: " + list + ")");
}

ScheduleKind scheduleKind(const std::string& name) { return traits(name).kind; }

const std::vector<std::string>& scheduleNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const ScheduleTraits& t : kTable) out.push_back(t.name);
    return out;
  }();
  return names;
}

void checkScheduleName(const std::string& name) { traits(name); }

int inflightMicrobatchesBound(ScheduleKind kind, int depth, int microbatches) {
  const ScheduleTraits& t = traits(kind);
  if (t.all_forwards_first) return microbatches;
  // A flushing 1F1B admits at most a mini-batch; an asynchronous stream never drains.
  return std::max(1, t.asynchronous ? depth : std::min(depth, microbatches));
}

double weightCopiesBound(ScheduleKind kind, int inflight, int extra_weight_buffers) {
  const int fixed = traits(kind).fixed_weight_versions;
  const double versions = fixed > 0 ? fixed : inflight;
  return versions + 1 + extra_weight_buffers;
}

}  // namespace pipetrain::schedule
