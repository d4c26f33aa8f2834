// The seven schedule generators. Each one decides, per stage (or per rank when
// interleaved), the order of compute actions, which weight version each reads, and
// where STEP creates a new version; nothing downstream knows which schedule it was.
#include <algorithm>
#include <functional>

#include "pipetrain/schedule/schedules.h"
#include "pipetrain/util/error.h"

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

// The 1F1B order of `n` micro-batches (first..first+n-1) after `warmup` forwards:
// F x warmup, then (F, B) pairs, then the remaining B. `true` = forward.
std::vector<std::pair<bool, int>> oneFOneBOrder(int first, int n, int warmup) {
  warmup = std::min(warmup, n);
  std::vector<std::pair<bool, int>> order;
  for (int i = 0; i < warmup; ++i) order.push_back({true, first + i});
  for (int i = 0; i < n - warmup; ++i) {
    order.push_back({true, first + warmup + i});
    order.push_back({false, first + i});
  }
  for (int i = n - warmup; i < n; ++i) order.push_back({false, first + i});
  return order;
}

struct Context {
  const ScheduleSpec& spec;
  const StageDag& dag;
  std::vector<int> depth;   // to sink
  std::vector<int> height;  // from source
  int m() const { return spec.microbatches; }
  int total() const { return spec.microbatches * spec.minibatches; }
};

using StageGenerator = std::function<std::vector<Action>(const Context&, int stage)>;

std::vector<Action> gpipe(const Context& c, int s) {
  std::vector<Action> out;
  for (int k = 0; k < c.spec.minibatches; ++k) {
    for (int j = 0; j < c.m(); ++j) out.push_back(computeAction(ActionType::F, s, k * c.m() + j, k));
    for (int j = 0; j < c.m(); ++j) out.push_back(computeAction(ActionType::B, s, k * c.m() + j, k));
    out.push_back(stepAction(s, k + 1));
  }
  return out;
}

std::vector<Action> oneFOneB(const Context& c, int s) {
  std::vector<Action> out;
  for (int k = 0; k < c.spec.minibatches; ++k) {
    for (auto [fwd, j] : oneFOneBOrder(k * c.m(), c.m(), c.depth[s]))
      out.push_back(computeAction(fwd ? ActionType::F : ActionType::B, s, j, k));
    out.push_back(stepAction(s, k + 1));
  }
  return out;
}

// ZB-H1: 1F1B with B split into I and W, where stage s runs W of micro-batch j only
// after I of micro-batch j + s. The deferred W passes land in the drain, where 1F1B
// would idle waiting for gradients; activations held stay at p for every stage.
std::vector<Action> zeroBubbleH1(const Context& c, int s) {
  std::vector<Action> out;
  const int defer = c.height[s];
  for (int k = 0; k < c.spec.minibatches; ++k) {
    const int first = k * c.m();
    int weights_done = 0, inputs_done = 0;
    for (auto [fwd, j] : oneFOneBOrder(first, c.m(), c.depth[s])) {
      if (fwd) {
        out.push_back(computeAction(ActionType::F, s, j, k));
        continue;
      }
      out.push_back(computeAction(ActionType::I, s, j, k));
      ++inputs_done;
      const int due = inputs_done == c.m() ? c.m() : inputs_done - defer;
      for (; weights_done < due; ++weights_done)
        out.push_back(computeAction(ActionType::W, s, first + weights_done, k));
    }
    out.push_back(stepAction(s, k + 1));
  }
  return out;
}

// The asynchronous schedules share one never-flushing 1F1B stream of all micro-batches
// and differ only in versions and steps.
std::vector<Action> asyncStream(const Context& c, int s,
                                const std::function<int(int mb, int current)>& forward_version,
                                bool stash, bool step_every_microbatch) {
  std::vector<Action> out;
  std::vector<int> read(c.total(), 0);
  int current = 0;
  for (auto [fwd, j] : oneFOneBOrder(0, c.total(), c.depth[s])) {
    if (fwd) {
      read[j] = forward_version(j, current);
      out.push_back(computeAction(ActionType::F, s, j, read[j]));
      continue;
    }
    out.push_back(computeAction(ActionType::B, s, j, stash ? read[j] : current));
    if (step_every_microbatch || (j + 1) % c.m() == 0) out.push_back(stepAction(s, ++current));
  }
  return out;
}

std::vector<Action> pipedream(const Context& c, int s) {
  return asyncStream(c, s, [](int, int current) { return current; }, true, true);
}

std::vector<Action> twoBW(const Context& c, int s) {
  // Mini-batch k reads version k-1: W(t+1) = W(t) - lr * grad f(W(t-1)).
  const int m = c.m();
  return asyncStream(c, s, [m](int j, int) { return std::max(0, j / m - 1); }, true, false);
}

std::vector<Action> pipemare(const Context& c, int s) {
  return asyncStream(c, s, [](int, int current) { return current; }, false, false);
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

void checkSpec(const ScheduleSpec& spec, const StageDag& dag, const std::vector<int>& depth) {
  checkScheduleName(spec.name);
  if (dag.size() < 1) throw Error("a pipeline needs at least one stage");
  if (spec.microbatches < 1) throw Error("micro-batches per mini-batch must be at least 1");
  if (spec.minibatches < 1) throw Error("mini-batches must be at least 1");
  if (spec.chunks < 1) throw Error("chunks must be at least 1");
  if (spec.name != "interleaved" && spec.chunks != 1)
    throw Error("--chunks applies to the interleaved schedule only (got " + spec.name + ")");
  const int p = 1 + *std::max_element(depth.begin(), depth.end());
  if (spec.name == "2bw" && spec.microbatches < p)
    throw Error("2bw needs at least as many micro-batches per mini-batch as pipeline stages (" +
                std::to_string(p) + "), got " + std::to_string(spec.microbatches) +
                ": with fewer, a mini-batch would read a version that does not exist yet");
  if (spec.name == "interleaved") {
    if (dag.size() % spec.chunks != 0)
      throw Error("interleaved: " + std::to_string(dag.size()) + " stages cannot be split into " +
                  std::to_string(spec.chunks) + " chunks per rank");
    const int ranks = dag.size() / spec.chunks;
    if (spec.microbatches % ranks != 0)
      throw Error("interleaved needs micro-batches divisible by the number of ranks (" +
                  std::to_string(ranks) + "), got " + std::to_string(spec.microbatches));
    for (int s = 0; s < dag.size(); ++s)
      if (dag.preds[s].size() > 1 || dag.succs[s].size() > 1)
        throw Error("interleaved needs a chain of stages; stage " + std::to_string(s) + " branches");
  }
}

}  // namespace

Program generate(const ScheduleSpec& spec, const StageDag& dag) {
  Context c{spec, dag, depthToSink(dag), heightFromSource(dag)};
  checkSpec(spec, dag, c.depth);

  Program program;
  program.schedule = spec.name;
  program.num_stages = dag.size();
  program.microbatches = spec.microbatches;
  program.minibatches = spec.minibatches;
  program.backward_weights = spec.name == "pipemare" ? BackwardWeights::kLatest : BackwardWeights::kStashed;
  program.stage_preds = dag.preds;
  program.stage_succs = dag.succs;

  if (spec.name == "interleaved") {
    const int p = dag.size() / spec.chunks;
    program.stage_ranks.resize(dag.size());
    for (int s = 0; s < dag.size(); ++s) program.stage_ranks[s] = {s % p};
    for (int r = 0; r < p; ++r) program.ranks.push_back(interleavedRank(c, r, p));
    return program;
  }

  StageGenerator generator;
  if (spec.name == "gpipe") generator = gpipe;
  else if (spec.name == "1f1b") generator = oneFOneB;
  else if (spec.name == "zb-h1") generator = zeroBubbleH1;
  else if (spec.name == "pipedream") generator = pipedream;
  else if (spec.name == "2bw") generator = twoBW;
  else generator = pipemare;

  for (int s = 0; s < dag.size(); ++s) {
    program.stage_ranks.push_back({s});
    program.ranks.push_back(generator(c, s));
  }
  if (spec.name == "pipedream" && spec.vertical_sync) {
    // Vertical sync: micro-batch j reads, on every stage, the version the input stage
    // read for it. Stages downstream have stepped further by then, so they stash the
    // older version; memory accounting sees that.
    std::vector<int> input_version(c.total(), 0);
    for (const Action& a : program.ranks[0])
      if (a.type == ActionType::F) input_version[a.microbatch] = a.version;
    for (int s = 1; s < dag.size(); ++s)
      for (Action& a : program.ranks[s])
        if (isCompute(a.type)) a.version = input_version[a.microbatch];
  } else if (spec.vertical_sync) {
    throw Error("vertical sync applies to the pipedream schedule only (got " + spec.name + ")");
  }
  return program;
}

}  // namespace pipetrain::schedule
