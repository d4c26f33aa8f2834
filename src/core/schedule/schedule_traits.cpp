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

constexpr auto kOne = Placement::kOnePerRank;
constexpr auto kLooped = Placement::kLooped;
constexpr auto kV = Placement::kV;

// kind, name, summary, async, placement, split_backward, backward weights, step, replicable,
// all forwards first, doubled warm-up, fixed weight versions, min micro-batches per rank
constexpr std::array<ScheduleTraits, kNumSchedules> kTable = {{
    {K::kGpipe, "gpipe", "all forwards, all backwards, flush", false, kOne, false, kStashed, kMini, true, true, false,
     1, 0},
    {K::k1F1B, "1f1b", "PipeDream-Flush / DAPPLE: warm-up, one forward one backward, drain", false, kOne, false,
     kStashed, kMini, true, false, false, 1, 0},
    {K::kPipeDream, "pipedream", "asynchronous 1F1B, a step after every backward, weight stashing", true, kOne, false,
     kStashed, kMicro, true, false, false, 0, 0},
    {K::k2BW, "2bw", "asynchronous 1F1B, two weight versions, a step per mini-batch", true, kOne, false, kStashed,
     kMini, true, false, false, 2, 1},
    {K::kPipeMare, "pipemare", "asynchronous 1F1B, one weight copy: backward reads the current weights", true, kOne,
     false, kLatest, kMini, true, false, false, 1, 0},
    {K::kInterleaved, "interleaved", "Megatron's interleaved 1F1B, several stages per rank", false, kLooped, false,
     kStashed, kMini, false, false, false, 1, 1},
    {K::kZbH1, "zb-h1", "zero bubble H1: backward split into input and weight passes", false, kOne, true, kStashed,
     kMini, true, false, false, 1, 0},
    {K::kZbH2, "zb-h2", "zero bubble H2: up to 2p-1 micro-batches in flight, weight passes fill every bubble", false,
     kOne, true, kStashed, kMini, true, false, true, 1, 0},
    {K::kZbV, "zb-v", "zero bubble V: two stages per rank in a V, 1F1B's activation memory", false, kV, true, kStashed,
     kMini, false, false, false, 1, 0},
    {K::kDualPipeV, "dualpipev", "DeepSeek's DualPipeV: a V of two stages per rank, forward and backward overlapped",
     false, kV, true, kStashed, kMini, false, false, false, 1, 2},
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
  throw Error("unknown schedule \"" + name + "\" (known: " + scheduleNameList() + ")");
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

std::string scheduleNameList() {
  std::string list;
  for (const ScheduleTraits& t : kTable) list += (list.empty() ? "" : ", ") + std::string(t.name);
  return list;
}

void checkScheduleName(const std::string& name) { traits(name); }

bool replicasCanSplit(const ScheduleTraits& t, int microbatches, int replicas) {
  if (replicas == 1) return true;
  if (replicas < 1 || !t.replicable || replicas > microbatches) return false;
  return t.step_rule == StepRule::kPerMinibatch || microbatches % replicas == 0;
}

int stagesPerRank(const ScheduleTraits& t, int chunks) {
  switch (t.placement) {
    case Placement::kLooped: return chunks;
    case Placement::kV: return 2;
    case Placement::kOnePerRank: break;
  }
  return 1;
}

int placedRank(Placement placement, int stage, int ranks) {
  if (placement == Placement::kV) return stage < ranks ? stage : 2 * ranks - 1 - stage;
  return stage % ranks;
}

int inflightMicrobatchesBound(ScheduleKind kind, int depth, int microbatches) {
  const ScheduleTraits& t = traits(kind);
  if (t.all_forwards_first) return microbatches;
  if (t.doubled_warmup) return std::max(1, std::min(2 * depth - 1, microbatches));
  // A flushing 1F1B admits at most a mini-batch; an asynchronous stream never drains.
  return std::max(1, t.asynchronous ? depth : std::min(depth, microbatches));
}

double weightCopiesBound(ScheduleKind kind, int inflight, int extra_weight_buffers) {
  const int fixed = traits(kind).fixed_weight_versions;
  const double versions = fixed > 0 ? fixed : inflight;
  return versions + 1 + extra_weight_buffers;
}

}  // namespace pipetrain::schedule
