// The schedule generators. Each one decides, per stage replica (or per rank when a rank
// runs several stages), the order of compute actions, which weight version each reads, and
// where STEP creates a new version; nothing downstream knows which schedule it was.
#include <algorithm>
#include <functional>

#include "generator_parts.h"
#include "pipetrain/schedule/schedules.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/limits.h"

namespace pipetrain::schedule {
namespace {

// Longest path (in stages) from each stage to a sink: the 1F1B warm-up depth.
// For a chain of p stages this is p - 1 - s.
std::vector<int> depthToSink(const StageDag& dag) {
  std::vector<int> depth(dag.size(), -1);
  std::function<int(int)> visit = [&](int s) {
    if (depth[s] >= 0) return depth[s];
    int d = 0;
    for (int t : dag.succs[s]) d = std::max(d, visit(t) + 1);
    return depth[s] = d;
  };
  for (int s = 0; s < dag.size(); ++s) visit(s);
  return depth;
}

// The 1F1B warm-up of each stage: forward passes a replica runs before its first
// backward pass, less one. Without replicas it is the depth to the sink. Counted in
// micro-batches of the whole stage (F = (warm-up + 1) x replicas), a stage never goes
// further ahead than its producers do, so a replicated stage behind a stage of fewer
// replicas never waits, before its first backward pass, for a micro-batch that the
// producer holds back until that backward pass returns (a deadlock: 4 replicas at depth
// 3 wanted 16 micro-batches from a producer that sent 5). Smaller warm-ups only hold
// fewer activations, so the planners' memory bounds still hold.
//
// Without flushes (the asynchronous schedules) a replicated stage's replicas also meet
// in an all-reduce every round, between backward passes. Round k's meeting needs the
// gradients of the round's last micro-batch j from the stages after it, and a consumer
// replica with warm-up w runs its forward of j + w x replicas before that backward: it
// must come from the forwards the stage ran before the meeting, which reach j + its own
// warm-up x replicas. So there, warm-up x replicas never grows along an edge (it is
// depth to the sink on chains without replicas, where nothing changes).
std::vector<int> warmups(const StageDag& dag, const std::vector<int>& replicas, bool replicas_meet_every_round) {
  const std::vector<int> depth = depthToSink(dag);
  std::vector<int> forwards(dag.size(), -1);  // what the stage forwards before its first backward pass
  std::vector<int> out(dag.size());
  std::function<int(int)> visit = [&](int s) {
    if (forwards[s] >= 0) return forwards[s];
    int f = (depth[s] + 1) * replicas[s];
    for (int q : dag.preds[s]) {
      f = std::min(f, visit(q));
      if (replicas_meet_every_round) f = std::min(f, out[q] * replicas[q] + replicas[s]);
    }
    out[s] = std::max(0, f / replicas[s] - 1);
    // Rounded down to whole rounds of its replicas; fewer than one round means one
    // micro-batch each, of which only the first f are sure to arrive.
    return forwards[s] = std::min(f, (out[s] + 1) * replicas[s]);
  };
  for (int s = 0; s < dag.size(); ++s) visit(s);
  return out;
}

// Longest path from a source to each stage (s for a chain).
std::vector<int> heightFromSource(const StageDag& dag) {
  std::vector<int> height(dag.size(), -1);
  std::function<int(int)> visit = [&](int s) {
    if (height[s] >= 0) return height[s];
    int h = 0;
    for (int q : dag.preds[s]) h = std::max(h, visit(q) + 1);
    return height[s] = h;
  };
  for (int s = 0; s < dag.size(); ++s) visit(s);
  return height;
}

// The 1F1B order of `mbs` after `warmup` forwards: F x warmup, then (F, B) pairs, then
// the remaining B. `true` = forward.
std::vector<std::pair<bool, int>> oneFOneBOrder(const std::vector<int>& mbs, int warmup) {
  const int n = static_cast<int>(mbs.size());
  warmup = std::min(warmup, n);
  std::vector<std::pair<bool, int>> order;
  for (int i = 0; i < warmup; ++i) order.push_back({true, mbs[i]});
  for (int i = 0; i < n - warmup; ++i) {
    order.push_back({true, mbs[warmup + i]});
    order.push_back({false, mbs[i]});
  }
  for (int i = n - warmup; i < n; ++i) order.push_back({false, mbs[i]});
  return order;
}

// Replica `index` of `count` of a stage runs the micro-batches j with j % count == index.
struct Replica {
  int index = 0;
  int count = 1;
};

struct Context {
  const ScheduleSpec& spec;
  const StageDag& dag;
  std::vector<int> depth;   // to sink
  std::vector<int> height;  // from source
  std::vector<int> warmup;  // warmups()
  int m() const { return spec.microbatches; }
  int total() const { return spec.microbatches * spec.minibatches; }
  // The micro-batches of [first, first + n) that replica `r` runs, in order.
  std::vector<int> own(int first, int n, Replica r) const {
    // Stepping by the replica count, not testing every j: a stage on 8192 replicas
    // otherwise cost m x 8192 tests per mini-batch, most of a large exploration.
    std::vector<int> mbs;
    for (int j = first + ((r.index - first % r.count) % r.count + r.count) % r.count; j < first + n; j += r.count)
      mbs.push_back(j);
    return mbs;
  }
  // Room for a replica's actions: `per_microbatch` of them for each micro-batch it runs,
  // and an all-reduce and a step per mini-batch (or per micro-batch: count those in).
  std::size_t room(Replica r, int per_microbatch) const {
    return static_cast<std::size_t>(total() / r.count + 1) * per_microbatch + 2 * spec.minibatches;
  }
};

// Replicas sum their gradients before every step.
void emitStep(std::vector<Action>& out, int stage, int new_version, Replica r) {
  if (r.count > 1) out.push_back(allReduceAction(stage));
  out.push_back(stepAction(stage, new_version));
}

std::vector<Action> gpipe(const Context& c, int s, Replica r) {
  std::vector<Action> out;
  out.reserve(c.room(r, 2));
  for (int k = 0; k < c.spec.minibatches; ++k) {
    const auto mbs = c.own(k * c.m(), c.m(), r);
    for (int j : mbs) out.push_back(computeAction(ActionType::F, s, j, k));
    for (int j : mbs) out.push_back(computeAction(ActionType::B, s, j, k));
    emitStep(out, s, k + 1, r);
  }
  return out;
}

std::vector<Action> oneFOneB(const Context& c, int s, Replica r) {
  std::vector<Action> out;
  out.reserve(c.room(r, 2));
  for (int k = 0; k < c.spec.minibatches; ++k) {
    for (auto [fwd, j] : oneFOneBOrder(c.own(k * c.m(), c.m(), r), c.warmup[s]))
      out.push_back(computeAction(fwd ? ActionType::F : ActionType::B, s, j, k));
    emitStep(out, s, k + 1, r);
  }
  return out;
}

// ZB-H1: 1F1B with B split into I and W, where stage s runs W of its i-th micro-batch
// only after I of its (i + s)-th. The deferred W passes land in the drain, where 1F1B
// would idle waiting for gradients; activations held stay at p for every stage.
std::vector<Action> zeroBubbleH1(const Context& c, int s, Replica r) {
  std::vector<Action> out;
  out.reserve(c.room(r, 3));
  const int defer = c.height[s];
  for (int k = 0; k < c.spec.minibatches; ++k) {
    const auto mbs = c.own(k * c.m(), c.m(), r);
    const int n = static_cast<int>(mbs.size());
    int weights_done = 0, inputs_done = 0;
    for (auto [fwd, j] : oneFOneBOrder(mbs, c.warmup[s])) {
      if (fwd) {
        out.push_back(computeAction(ActionType::F, s, j, k));
        continue;
      }
      out.push_back(computeAction(ActionType::I, s, j, k));
      ++inputs_done;
      const int due = inputs_done == n ? n : inputs_done - defer;
      for (; weights_done < due; ++weights_done)
        out.push_back(computeAction(ActionType::W, s, mbs[weights_done], k));
    }
    emitStep(out, s, k + 1, r);
  }
  return out;
}

// The asynchronous schedules share one never-flushing 1F1B stream of all micro-batches
// and differ only in versions and steps, with the warm-ups of 1F1B where replicas do not
// meet every round (warmups()).
std::vector<Action> asyncStream(const Context& c, int s, Replica r,
                                const std::function<int(int mb, int current)>& forward_version) {
  const ScheduleTraits& t = traits(c.spec.name);
  const bool stash = t.backward_weights == BackwardWeights::kStashed;
  std::vector<Action> out;
  out.reserve(c.room(r, 4));  // F and B, and the step after each micro-batch under PipeMare
  std::vector<int> read(c.total(), 0);
  int current = 0;
  for (auto [fwd, j] : oneFOneBOrder(c.own(0, c.total(), r), c.warmup[s])) {
    if (fwd) {
      read[j] = forward_version(j, current);
      out.push_back(computeAction(ActionType::F, s, j, read[j]));
      continue;
    }
    out.push_back(computeAction(ActionType::B, s, j, stash ? read[j] : current));
    // Per mini-batch: after the replica's last micro-batch of j's mini-batch.
    const bool last_of_minibatch = j % c.m() + r.count >= c.m();
    if (t.step_rule == StepRule::kPerMicrobatch || last_of_minibatch) emitStep(out, s, ++current, r);
  }
  return out;
}

std::vector<Action> stageReplica(const Context& c, int s, Replica r) {
  const int m = c.m();
  switch (scheduleKind(c.spec.name)) {
    case ScheduleKind::kGpipe: return gpipe(c, s, r);
    case ScheduleKind::k1F1B: return oneFOneB(c, s, r);
    case ScheduleKind::kZbH1: return zeroBubbleH1(c, s, r);
    case ScheduleKind::kPipeDream:
    case ScheduleKind::kPipeMare: return asyncStream(c, s, r, [](int, int current) { return current; });
    case ScheduleKind::k2BW:
      // Mini-batch k reads version k-1: W(t+1) = W(t) - lr * grad f(W(t-1)).
      return asyncStream(c, s, r, [m](int j, int) { return std::max(0, j / m - 1); });
    case ScheduleKind::kInterleaved:
    case ScheduleKind::kZbH2:
    case ScheduleKind::kZbV:
    case ScheduleKind::kDualPipeV:
    case ScheduleKind::kCount: break;
  }
  throw Error("internal: " + c.spec.name + " has no per-stage generator");
}

// Megatron-LM's interleaved 1F1B: rank r holds stages r, r+p, ..., r+(v-1)p.
std::vector<Action> interleavedRank(const Context& c, int r, int p) {
  const int v = c.spec.chunks;
  const int m = c.m();
  const int total = m * v;
  const int warmup = std::min((p - r - 1) * 2 + (v - 1) * p, total);
  auto chunkOp = [&](int k, bool forward, int first) {
    const int within = k % (p * v);
    const int chunk = forward ? within / p : v - 1 - within / p;
    const int mb = first + (k / (p * v)) * p + within % p;
    return std::make_pair(chunk * p + r, mb);
  };
  std::vector<Action> out;
  for (int mini = 0; mini < c.spec.minibatches; ++mini) {
    const int first = mini * m;
    auto emit = [&](bool forward, int k) {
      auto [stage, mb] = chunkOp(k, forward, first);
      out.push_back(computeAction(forward ? ActionType::F : ActionType::B, stage, mb, mini));
    };
    for (int k = 0; k < warmup; ++k) emit(true, k);
    for (int k = 0; k < total - warmup; ++k) {
      emit(true, warmup + k);
      emit(false, k);
    }
    for (int k = total - warmup; k < total; ++k) emit(false, k);
    for (int chunk = 0; chunk < v; ++chunk) out.push_back(stepAction(chunk * p + r, mini + 1));
  }
  return out;
}

void checkSpec(const ScheduleSpec& spec, const StageDag& dag, const std::vector<int>& depth,
               const std::vector<int>& replicas) {
  const ScheduleTraits& t = traits(spec.name);
  if (dag.size() < 1) throw Error("a pipeline needs at least one stage");
  if (spec.microbatches < 1) throw Error("micro-batches per mini-batch must be at least 1");
  if (spec.minibatches < 1) throw Error("mini-batches must be at least 1");
  if (spec.chunks < 1) throw Error("chunks must be at least 1");
  if (t.placement != Placement::kLooped && spec.chunks != 1)
    throw Error("--chunks applies to the interleaved schedule only (got " + spec.name + ")");
  if (spec.vertical_sync && t.step_rule != StepRule::kPerMicrobatch)
    throw Error("vertical sync applies to the pipedream schedule only (got " + spec.name + ")");
  if (static_cast<int>(replicas.size()) != dag.size())
    throw Error("replica counts given for " + std::to_string(replicas.size()) + " stages, but the pipeline has " +
                std::to_string(dag.size()));
  for (int s = 0; s < dag.size(); ++s) {
    const int c = replicas[s];
    if (c < 1) throw Error("stage " + std::to_string(s) + " needs at least one replica");
    if (c > 1 && !t.replicable) throw Error(spec.name + " stages cannot have replicas (stage " + std::to_string(s) + ")");
    if (c > spec.microbatches)
      throw Error("stage " + std::to_string(s) + " has " + std::to_string(c) + " replicas but a mini-batch only " +
                  std::to_string(spec.microbatches) + " micro-batches: every replica needs one of its own");
    if (!replicasCanSplit(t, spec.microbatches, c))
      throw Error(spec.name + " steps after every round of one micro-batch per replica, so a stage with " +
                  std::to_string(c) + " replicas needs micro-batches per mini-batch divisible by " +
                  std::to_string(c) + ", got " + std::to_string(spec.microbatches));
  }
  const int per_rank = stagesPerRank(t, spec.chunks);
  const int p = multiStage(t) ? dag.size() / per_rank : 1 + *std::max_element(depth.begin(), depth.end());
  if (t.min_microbatches_per_rank > 0 && spec.microbatches < t.min_microbatches_per_rank * p)
    throw Error(spec.name + " needs at least " + std::to_string(t.min_microbatches_per_rank * p) +
                " micro-batches per mini-batch on " + std::to_string(p) + " pipeline ranks, got " +
                std::to_string(spec.microbatches) +
                (t.fixed_weight_versions == 2 ? ": with fewer, a mini-batch would read a version that does not exist yet"
                                              : ""));
  if (multiStage(t)) {
    if (dag.size() % per_rank != 0)
      throw Error(spec.name + ": " + std::to_string(dag.size()) + " stages cannot be split into " +
                  std::to_string(per_rank) + " stages per rank");
    if (t.placement == Placement::kLooped && spec.microbatches % p != 0)
      throw Error(spec.name + " needs micro-batches divisible by the number of ranks (" + std::to_string(p) +
                  "), got " + std::to_string(spec.microbatches));
    for (int s = 0; s < dag.size(); ++s)
      if (dag.preds[s].size() > 1 || dag.succs[s].size() > 1)
        throw Error(spec.name + " needs a chain of stages; stage " + std::to_string(s) + " branches");
  }
}

// Vertical sync: micro-batch j reads, on every stage, the newest version that reflects
// no more micro-batches than the version the input stage read for it. Stages downstream
// have stepped further by then, so they stash the older version; memory accounting sees
// that. A stage with c replicas steps once per c micro-batches, so its version v
// reflects v * c of them.
void applyVerticalSync(Program& program, const std::vector<int>& replicas) {
  std::vector<int> sources;
  for (int s = 0; s < program.num_stages; ++s)
    if (program.isFirstStage(s)) sources.push_back(s);
  if (sources.size() != 1) throw Error("vertical sync needs a pipeline with one input stage");
  const int input = sources[0];
  std::vector<int> input_version(program.totalMicrobatches(), 0);
  for (int rank : program.stage_ranks[input])
    for (const Action& a : program.ranks[rank])
      if (a.type == ActionType::F) input_version[a.microbatch] = a.version;
  for (int r = 0; r < program.numRanks(); ++r)
    for (Action& a : program.ranks[r])
      if (isCompute(a.type) && a.stage != input)
        a.version = input_version[a.microbatch] * replicas[input] / replicas[a.stage];
}

}  // namespace

std::vector<int> forwardsBeforeFirstBackward(const std::string& schedule, const StageDag& dag,
                                             const std::vector<int>& replicas, int microbatches) {
  const ScheduleTraits& t = traits(schedule);
  // oneFOneB(), zeroBubbleH1() and asyncStream() run oneFOneBOrder() after warmups();
  // ZB-H2's list schedule holds up to the whole pipeline's bound at every stage.
  const bool in_1f1b_order = t.kind == ScheduleKind::k1F1B || t.kind == ScheduleKind::kZbH1 || t.asynchronous;
  const std::vector<int> warmup = in_1f1b_order ? warmups(dag, replicas, t.asynchronous) : std::vector<int>();
  const int depth = pipelineDepth(dag);
  std::vector<int> out(dag.size());
  for (int s = 0; s < dag.size(); ++s) {
    const int share = busiestReplicaShare(microbatches, replicas[s]);
    if (!in_1f1b_order)
      out[s] = inflightMicrobatchesBound(t.kind, depth, share);
    else  // an asynchronous stream never drains: its warm-up runs on into the next mini-batch
      out[s] = t.asynchronous ? warmup[s] + 1 : std::min(share, warmup[s] + 1);
  }
  return out;
}

int pipelineDepth(const StageDag& dag) {
  const std::vector<int> depth = depthToSink(dag);
  return dag.size() == 0 ? 0 : 1 + *std::max_element(depth.begin(), depth.end());
}

Program generate(const ScheduleSpec& spec, const StageDag& dag, const std::vector<int>& replicas_given) {
  // Before any work that grows with the numbers (the depths below recurse over stages).
  limits::checkProgramSize(dag.size(), spec.microbatches, spec.minibatches, spec.name + " schedule");
  const std::vector<int> replicas = replicas_given.empty() ? std::vector<int>(dag.size(), 1) : replicas_given;
  Context c{spec, dag, depthToSink(dag), heightFromSource(dag), {}};
  checkSpec(spec, dag, c.depth, replicas);
  const ScheduleTraits& t = traits(spec.name);
  c.warmup = warmups(dag, replicas, t.asynchronous);
  if (t.fixed_weight_versions == 2 && spec.minibatches > 2)
    for (int s = 0; s < dag.size(); ++s) {
      // Mini-batch k + 1 reads the version stepped after mini-batch k - 1, so a replica's
      // first forward of it, `warmup` forwards ahead of its backward passes, must follow
      // that step: every replica needs at least `warmup` micro-batches of each mini-batch
      // (from the third mini-batch on, the first to read a stepped version).
      const int fewest = spec.microbatches / replicas[s];
      if (fewest < c.warmup[s])
        throw Error(spec.name + ": a replica of stage " + std::to_string(s) + " runs " + std::to_string(fewest) +
                    " micro-batch(es) of some mini-batch but keeps " + std::to_string(c.warmup[s]) +
                    " in flight; with fewer than that, a mini-batch would read a version that does not exist yet "
                    "(use more micro-batches or fewer replicas)");
    }

  Program program;
  program.schedule = spec.name;
  program.num_stages = dag.size();
  program.microbatches = spec.microbatches;
  program.minibatches = spec.minibatches;
  program.backward_weights = t.backward_weights;
  program.stage_preds = dag.preds;
  program.stage_succs = dag.succs;
  program.stage_ranks.resize(dag.size());

  if (multiStage(t)) {
    const int p = dag.size() / stagesPerRank(t, spec.chunks);
    for (int s = 0; s < dag.size(); ++s) program.stage_ranks[s] = {placedRank(t.placement, s, p)};
    program.ranks.resize(p);
  } else {
    int next_rank = 0;
    for (int s = 0; s < dag.size(); ++s)
      for (int k = 0; k < replicas[s]; ++k) program.stage_ranks[s].push_back(next_rank++);
    program.ranks.resize(next_rank);
  }
  switch (t.kind) {
    case ScheduleKind::kInterleaved:
      for (int r = 0; r < program.numRanks(); ++r) program.ranks[r] = interleavedRank(c, r, program.numRanks());
      return program;
    case ScheduleKind::kDualPipeV:
      for (int r = 0; r < program.numRanks(); ++r)
        program.ranks[r] = detail::dualPipeVRank(r, program.numRanks(), spec.microbatches, spec.minibatches);
      return program;
    case ScheduleKind::kZbH2: {
      // Up to 2p-1 micro-batches in flight on a p-stage path: enough forward passes to
      // cover the first stage's wait for its first gradient (the ZB paper's ZB-H2).
      const int p = 1 + *std::max_element(c.depth.begin(), c.depth.end());
      program.ranks = detail::zeroBubbleListSchedule(program, 2 * p - 1);
      return program;
    }
    case ScheduleKind::kZbV:
      for (int r = 0; r < program.numRanks(); ++r)
        program.ranks[r] = detail::zeroBubbleVRank(r, program.numRanks(), spec.microbatches, spec.minibatches);
      return program;
    default: break;
  }
  for (int s = 0; s < dag.size(); ++s)
    for (int k = 0; k < replicas[s]; ++k)
      program.ranks[program.stage_ranks[s][k]] = stageReplica(c, s, Replica{k, replicas[s]});
  if (spec.vertical_sync) applyVerticalSync(program, replicas);
  return program;
}

}  // namespace pipetrain::schedule
