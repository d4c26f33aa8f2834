#include "pipetrain/planner/graph_partition.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <unordered_map>

#include "pipetrain/graph/series_parallel.h"
#include "pipetrain/plan/plan_program.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/text.h"
#include "stage_graph_search.h"

namespace pipetrain::planner {
namespace {

using detail::kNoPartition;
constexpr int kUnsolved = -1;
constexpr double kInfinity = std::numeric_limits<double>::infinity();
// The bisection stops when the bottleneck found is within this share of the optimum.
constexpr double kBisectionTolerance = 1e-6;
// Parallel parts of at most this many layers are also tried as one series by level
// (SpNode::by_level): its runs multiply the states by the square of its length.
constexpr int kMaxLevelLayers = 12;

using graph::SpNode;

// A run of children [first, end) of a tree node on devices [d0, d1), with `after`
// stages behind it on the way to the end.
struct State {
  int node, first, end, d0, d1, after;
  bool operator==(const State& o) const {
    return node == o.node && first == o.first && end == o.end && d0 == o.d0 && d1 == o.d1 && after == o.after;
  }
};
struct StateHash {
  std::size_t operator()(const State& s) const {
    std::size_t h = 0;
    for (int v : {s.node, s.first, s.end, s.d0, s.d1, s.after}) h = h * 1000003u + static_cast<std::size_t>(v);
    return h;
  }
};

// How a state's best partition was made.
struct Choice {
  enum class Kind { kStage, kChild, kLevels, kSeries, kParallel, kJoin } kind = Kind::kStage;
  int split = 0;   // kSeries / kParallel: the first child of the second part; kJoin: which join
  bool swapped = false;  // kParallel: the second part takes the first devices
  int device = 0;  // kStage: the block's first device; splits: the second part's first device
  int end_device = 0;  // kStage: the block's end
  int second_depth = 0;  // kSeries, kJoin: the second part's depth
  double seconds = 0;    // kStage: the stage's time; kSeries, kJoin: the transfer's (what the limit was held against)
};

struct Entry {
  int depth = kNoPartition;
  Choice choice;
  double worst = 0;      // the slowest stage or transfer of the partition chosen
  double solved_at = 0;  // the limit it was found under
};

// GraphPipe's DP over the series-parallel tree (see the header).
class SeriesParallelSearch final : public detail::StageGraphSearch {
 public:
  // `depth_floor`: memory is sized for at least this many stages to the end.
  // `max_steps`: the budget of best() calls over all solves.
  SeriesParallelSearch(const graph::LayerGraph& graph, const ChainProblem& problem, const graph::SpTree& tree,
                       int depth_floor, int64_t max_steps)
      : graph_(graph), problem_(problem), tree_(tree), depth_floor_(depth_floor), max_steps_(max_steps) {
    const cluster::ClusterSpec& c = problem.cluster();
    bool identical = c.links().empty();
    for (int d = 1; d < problem.numDevices(); ++d)
      identical = identical && c.device(d).speed == c.device(0).speed && c.device(d).memory_bytes == c.device(0).memory_bytes;
    period_ = identical ? 1 : problem.numDevices();
    if (identical)
      for (const cluster::Level& level : c.levels())
        if (level.group_size < problem.numDevices()) period_ = std::max(period_, level.group_size);
    findAliases();
    int runs = 0;
    for (std::size_t v = 0; v < tree.nodes.size(); ++v) {
      run_base_.push_back(runs);
      runs += (width(static_cast<int>(v)) + 1) * (width(static_cast<int>(v)) + 1);
    }
    const std::size_t entries = static_cast<std::size_t>(runs) * period_ * (problem.numDevices() + 1);
    dense_.reset(static_cast<Entry*>(std::malloc(entries * sizeof(Entry))));
    if (entries > 0 && !dense_)
      throw Error("the graph partitioner could not allocate its table of " + std::to_string(entries) + " states");
    dense_made_.assign(entries, false);
    child_prefix_.resize(tree.nodes.size());
    for (std::size_t v = 0; v < tree.nodes.size(); ++v) {
      const SpNode& node = tree.nodes[v];
      auto& prefix = child_prefix_[v];
      prefix.assign(1, StageSums{});
      if (node.kind == SpNode::Kind::kLayer) {
        prefix.push_back(problem.sumsOf({node.layer}));
        continue;
      }
      for (int c : node.children) {
        StageSums next = prefix.back();
        prefix.push_back(next += problem.sumsOf(tree.nodes[c].layers));
      }
    }
  }

  int solve(double limit) override {
    limit_ = limit;
    if (gaveUp()) return kNoPartition;
    used_ = 0;
    int depth = kNoPartition;
    for (int e = 1; e <= problem_.numDevices(); ++e) {
      const int d = best(root(e));
      if (d < depth) depth = d, used_ = e;
    }
    return depth;
  }

  GraphPartition partition() override {
    GraphPartition p;
    collect(root(used_), p);
    return p;
  }

  bool gaveUp() const override { return steps_ > max_steps_; }
  int64_t steps() const override { return steps_; }

 private:
  State root(int devices) const { return {tree_.root, 0, width(tree_.root), 0, devices, 0}; }

  int width(int node) const {
    const SpNode& n = tree_.nodes[node];
    return n.kind == SpNode::Kind::kLayer ? 1 : static_cast<int>(n.children.size());
  }

  std::vector<int> layersOf(const State& s) const {
    const SpNode& n = tree_.nodes[s.node];
    if (n.kind == SpNode::Kind::kLayer) return n.layers;
    std::vector<int> layers;
    for (int c = s.first; c < s.end; ++c) {
      const auto& more = tree_.nodes[n.children[c]].layers;
      layers.insert(layers.end(), more.begin(), more.end());
    }
    std::sort(layers.begin(), layers.end());
    return layers;
  }

  // Bytes per micro-batch that children [first, split) send to children [split, end) of
  // a series node.
  double crossingBytes(int node, int first, int split, int end) {
    const auto key = std::make_tuple(node, first, split, end);
    auto it = crossing_.find(key);
    if (it != crossing_.end()) return it->second;
    return crossing_[key] = bytesBetween(layersOf({node, first, split, 0, 0, 0}), layersOf({node, split, end, 0, 0, 0}));
  }

  // What layers `from` send to layers `to` per micro-batch: each producer's output once.
  double bytesBetween(const std::vector<int>& from, const std::vector<int>& to) const {
    std::vector<char> in_to(graph_.size(), 0);
    for (int l : to) in_to[l] = 1;
    double bytes = 0;
    for (int l : from)
      for (int s : graph_.successors(l))
        if (in_to[s]) {
          bytes += problem_.outputBytes(l);
          break;
        }
    return bytes;
  }

  // A run of series node s.node from a parallel child on, as a join (SpNode::joins):
  // the parallel child's first branches on their own, and the run of the join's series
  // that holds the rest of the run.
  State joinApart(const State& s, const SpNode::Join& join, int d, int after) const {
    return {tree_.nodes[s.node].children[join.child], 0, join.apart, s.d0, d, after};
  }
  State joinTogether(const State& s, const SpNode::Join& join, int d) const {
    return {join.series, 0, joinedChildren(s.node, join) + s.end - s.first - 1, d, s.d1, s.after};
  }
  // The children of a join's series that come from the joined branches (before the
  // series node's children after the parallel one).
  int joinedChildren(int node, const SpNode::Join& join) const {
    return width(join.series) - (width(node) - join.child - 1);
  }

  // On identical devices joined by levels of nested groups, moving a window by the
  // largest group that does not span all devices changes no price (levels nest, so
  // every smaller group moves with it): windows are keyed by their size and their
  // first device's place within such a group, which divides the states by the devices
  // over that group size.
  // Likewise `after` only sizes memory: where the whole region fits every device of the
  // window at the deepest possible pipeline, no stage of it can miss memory, and the
  // depth behind it does not change the answer.
  State canonical(State s) const {
    const int shift = s.d0 - s.d0 % period_;
    s.d0 -= shift;
    s.d1 -= shift;
    if (s.after > 0 && !memoryCanBind(s)) s.after = 0;
    return s;
  }

  bool memoryCanBind(const State& s) const {
    if (!problem_.options().check_memory) return false;
    const StageSums all = child_prefix_[s.node][s.end] - child_prefix_[s.node][s.first];
    const int deepest = std::max(problem_.numDevices(), depth_floor_);
    return problem_.stageMemoryBytes(all, 1, deepest) > problem_.deviceBlock(s.d0, s.d1).memory_bytes;
  }

  int best(const State& s) {
    if (++steps_ > max_steps_) return kNoPartition;  // gave up: solve() answers nothing
    const State key = canonical(unaliased(s));
    const Entry& slot = entry(key);
    if (slot.depth != kUnsolved && detail::stillHolds(slot, limit_)) return slot.depth;
    Entry e = search(key);
    e.solved_at = limit_;
    entry(key) = e;  // `slot` may have moved: search() adds entries
    return e.depth;
  }

  // The slowest stage or transfer of a state's partition, once best() has solved it.
  double worstOf(const State& s) { return entry(canonical(unaliased(s))).worst; }

  const Choice& choiceOf(const State& s) {
    best(s);
    return entry(canonical(unaliased(s))).choice;
  }

  // A join's nodes repeat runs of the decomposition's: the joined branches are a run of
  // the parallel node's children (or, where one branch joins, its own children), the
  // children after them a run of the series node's. Such runs are searched once, as the
  // decomposition's; only runs that hold both a branch and what follows it are new.
  struct Alias {
    int node = -1;  // runs starting at child `from` or later are node's runs `shift` children further on
    int from = 0;
    int shift = 0;
    int branch = -1;  // runs ending at child `until` or before are the branch's own runs
    int until = 0;
  };
  void findAliases() {
    aliases_.resize(tree_.nodes.size());
    for (std::size_t v = 0; v < tree_.nodes.size(); ++v)
      for (const SpNode::Join& join : tree_.nodes[v].joins) {
        const SpNode& parallel = tree_.nodes[tree_.nodes[v].children[join.child]];
        const SpNode& series = tree_.nodes[join.series];
        const int before = joinedChildren(static_cast<int>(v), join);
        aliases_[join.series] = {static_cast<int>(v), before, join.child + 1 - before};
        const int joined = series.children[0];
        const int branch = parallel.children.back();
        if (before > 1) aliases_[join.series].branch = branch, aliases_[join.series].until = before;
        if (before == 1 && tree_.nodes[joined].kind == SpNode::Kind::kParallel &&
            tree_.nodes[joined].children.size() < parallel.children.size())
          aliases_[joined] = {tree_.nodes[v].children[join.child], 0, join.apart};
      }
  }
  State unaliased(State s) const {
    const Alias& a = aliases_[s.node];
    if (a.node >= 0 && s.first >= a.from) {
      s.node = a.node;
      s.first += a.shift;
      s.end += a.shift;
    } else if (a.branch >= 0 && s.end <= a.until) {
      s.node = a.branch;
    }
    return s;
  }

  // The memo: a dense table for states with nothing behind them or whose memory cannot
  // bind (most of them), a hash map for the rest. The table was 5x faster than hashing
  // every state at 32 devices.
  Entry& entry(const State& s) {
    if (s.after == 0) {
      const std::size_t windows = static_cast<std::size_t>(period_) * (problem_.numDevices() + 1);
      const std::size_t index = (static_cast<std::size_t>(run_base_[s.node]) + s.first * (width(s.node) + 1) + s.end) *
                                    windows + static_cast<std::size_t>(s.d0) * (problem_.numDevices() + 1) + (s.d1 - s.d0);
      if (!dense_made_[index]) {
        new (dense_.get() + index) Entry{kUnsolved, {}};
        dense_made_[index] = true;
      }
      return dense_.get()[index];
    }
    return deep_.try_emplace(s, Entry{kUnsolved, {}}).first->second;
  }

  // Choices give devices as offsets from the window's first device.
  Entry search(const State& s) {
    Entry result;
    // One stage on the whole window, if it is fast enough and holds the stage's weights
    // and after + 1 micro-batches in flight. Windows are tiled exactly, as the chain DP
    // tiles a prefix, so every transfer is priced between the devices that make it.
    const StageSums sums = child_prefix_[s.node][s.end] - child_prefix_[s.node][s.first];
    if (problem_.allowedDevices(s.d0, s.d1)) {
      const DeviceBlock block = problem_.deviceBlock(s.d0, s.d1);
      const double seconds = problem_.stageSeconds(sums, block, problem_.recomputesAll());
      const bool fits = !problem_.options().check_memory ||
                        problem_.stageMemoryBytes(sums, block.replicas(), std::max(s.after + 1, depth_floor_)) <= block.memory_bytes;
      if (seconds <= limit_ && fits) return {1, {Choice::Kind::kStage, 0, false, 0, s.d1 - s.d0, 0, seconds}, seconds};
    }
    const SpNode& n = tree_.nodes[s.node];
    if (n.kind == SpNode::Kind::kLayer) return result;
    if (s.end - s.first == 1) {
      const int child = n.children[s.first];
      if (tree_.nodes[child].kind == SpNode::Kind::kLayer) return result;  // tried as one stage above
      const State only{child, 0, width(child), s.d0, s.d1, s.after};
      result.depth = best(only);
      result.choice.kind = Choice::Kind::kChild;
      result.worst = worstOf(only);
      return result;
    }
    if (n.by_level >= 0 && s.first == 0 && s.end == width(s.node) &&
        static_cast<int>(n.layers.size()) <= kMaxLevelLayers) {
      // The branches' layers as one series by level: stages may cut across branches.
      const State levels{n.by_level, 0, width(n.by_level), s.d0, s.d1, s.after};
      const int depth = best(levels);
      if (depth < result.depth) result = {depth, {Choice::Kind::kLevels}, worstOf(levels)};
    }
    const bool series = n.kind == SpNode::Kind::kSeries;
    for (int split = s.first + 1; split < s.end; ++split)
      for (int d = s.d0 + 1; d < s.d1; ++d) {
        if (series) {
          const State second{s.node, split, s.end, d, s.d1, s.after};
          const int second_depth = best(second);
          if (second_depth == kNoPartition || second_depth + 1 >= result.depth) continue;
          const double transfer = problem_.messagesSeconds(crossingBytes(s.node, s.first, split, s.end), d - 1, d);
          if (transfer > limit_) continue;
          const State first{s.node, s.first, split, s.d0, d, s.after + second_depth};
          const int first_depth = best(first);
          if (first_depth != kNoPartition && first_depth + second_depth < result.depth)
            result = {first_depth + second_depth,
                      {Choice::Kind::kSeries, split, false, d - s.d0, 0, second_depth, transfer},
                      std::max({transfer, worstOf(first), worstOf(second)})};
          continue;
        }
        // Either part may take the first devices: on a cluster of fast and slow nodes
        // the heavier branches should get the fast ones.
        for (const bool swapped : {false, true}) {

          const State first{s.node, s.first, split, swapped ? d : s.d0, swapped ? s.d1 : d, s.after};
          const int a = best(first);
          if (a == kNoPartition || a >= result.depth) continue;
          const State second{s.node, split, s.end, swapped ? s.d0 : d, swapped ? d : s.d1, s.after};
          const int b = best(second);
          if (b != kNoPartition && std::max(a, b) < result.depth)
            result = {std::max(a, b), {Choice::Kind::kParallel, split, swapped, d - s.d0, 0, 0},
                      std::max(worstOf(first), worstOf(second))};
        }
      }
    if (series && s.end - s.first >= 2)
      for (std::size_t j = 0; j < n.joins.size(); ++j)
        if (n.joins[j].child == s.first) tryJoin(s, static_cast<int>(j), result);
    return result;
  }

  // The run's parallel child's first branches on the first devices, the other branches
  // with the children after them on the rest (the later part first, as a series split).
  void tryJoin(const State& s, int j, Entry& result) {
    const SpNode::Join& join = tree_.nodes[s.node].joins[j];
    for (int d = s.d0 + 1; d < s.d1; ++d) {
      const State together = joinTogether(s, join, d);
      const int second_depth = best(together);
      if (second_depth == kNoPartition || second_depth + 1 >= result.depth) continue;
      const auto key = std::make_tuple(s.node, j, together.end);
      auto it = joined_bytes_.find(key);
      if (it == joined_bytes_.end())
        it = joined_bytes_.emplace(key, bytesBetween(layersOf(joinApart(s, join, d, 0)), layersOf(together))).first;
      const double transfer = problem_.messagesSeconds(it->second, d - 1, d);
      if (transfer > limit_) continue;
      const State apart = joinApart(s, join, d, s.after + second_depth);
      const int first_depth = best(apart);
      if (first_depth != kNoPartition && first_depth + second_depth < result.depth)
        result = {first_depth + second_depth, {Choice::Kind::kJoin, j, false, d - s.d0, 0, second_depth, transfer},
                  std::max({transfer, worstOf(apart), worstOf(together)})};
    }
  }

  // The stages of a solved state, appended in topological order (first parts first).
  void collect(State s, GraphPartition& p) {
    s = unaliased(s);
    const Choice c = choiceOf(s);
    const int d = s.d0 + c.device;
    switch (c.kind) {
      case Choice::Kind::kStage:
        p.stages.push_back({layersOf(s), d, s.d0 + c.end_device, s.after + 1});
        p.objective = std::max(p.objective, c.seconds);
        return;
      case Choice::Kind::kChild: {
        const int child = tree_.nodes[s.node].children[s.first];
        collect({child, 0, width(child), s.d0, s.d1, s.after}, p);
        return;
      }
      case Choice::Kind::kLevels: {
        const int levels = tree_.nodes[s.node].by_level;
        collect({levels, 0, width(levels), s.d0, s.d1, s.after}, p);
        return;
      }
      case Choice::Kind::kSeries:
        p.objective = std::max(p.objective, c.seconds);
        collect({s.node, s.first, c.split, s.d0, d, s.after + c.second_depth}, p);
        collect({s.node, c.split, s.end, d, s.d1, s.after}, p);
        return;
      case Choice::Kind::kJoin: {
        const SpNode::Join& join = tree_.nodes[s.node].joins[c.split];
        p.objective = std::max(p.objective, c.seconds);
        collect(joinApart(s, join, d, s.after + c.second_depth), p);
        collect(joinTogether(s, join, d), p);
        return;
      }
      case Choice::Kind::kParallel:
        collect({s.node, s.first, c.split, c.swapped ? d : s.d0, c.swapped ? s.d1 : d, s.after}, p);
        collect({s.node, c.split, s.end, c.swapped ? s.d0 : d, c.swapped ? d : s.d1, s.after}, p);
        return;
    }
  }

  const graph::LayerGraph& graph_;
  const ChainProblem& problem_;
  const graph::SpTree& tree_;
  std::vector<std::vector<StageSums>> child_prefix_;    // per node: sums over its first c children
  std::map<std::tuple<int, int, int, int>, double> crossing_;
  std::map<std::tuple<int, int, int>, double> joined_bytes_;  // tryJoin's transfers, by (node, join, end)
  std::vector<Alias> aliases_;  // per node (findAliases)
  std::vector<int> run_base_;   // per node: where its runs [first, end) begin in dense_
  // Made on first use: most states are never reached, and writing every entry up front
  // faulted in the whole table (docs/planner.md, "The graph partitioner's memo").
  struct Free {
    void operator()(Entry* e) const { std::free(e); }
  };
  std::unique_ptr<Entry, Free> dense_;
  std::vector<bool> dense_made_;
  std::unordered_map<State, Entry, StateHash> deep_;
  const int depth_floor_;
  int period_ = 1;  // windows this many devices apart price alike (canonical())
  double limit_ = kInfinity;
  int used_ = 0;  // devices of the partition solve() found
  const int64_t max_steps_;
  int64_t steps_ = 0;  // best() calls over all solves: the DP's transitions
};

// The stage graph's real depths. The search counts a run of a by-level series as deep
// as the series before it, which is safe for memory but may overstate branches cut
// across; what is reported is the stage graph's.
void setDepths(GraphPartition& p, const graph::LayerGraph& graph) {
  std::vector<int> stage_of(graph.size(), -1);
  for (std::size_t s = 0; s < p.stages.size(); ++s)
    for (int l : p.stages[s].layers) stage_of[l] = static_cast<int>(s);
  // Stages are in a topological order: a stage's depth is known before its producers'.
  p.depth = 0;
  for (int s = static_cast<int>(p.stages.size()) - 1; s >= 0; --s) {
    int depth = 1;
    for (int l : p.stages[s].layers)
      for (int c : graph.successors(l))
        if (stage_of[c] != s) depth = std::max(depth, 1 + p.stages[stage_of[c]].depth);
    p.stages[s].depth = depth;
    p.depth = std::max(p.depth, depth);
  }
}

}  // namespace

namespace {

// Under 1F1B-like schedules a stage holds as many micro-batches as there are stages
// from it to the end, which the search knows exactly. Zero-bubble schedules defer
// backward passes by the stage's distance from the input as well, so there every
// stage may hold the whole pipeline's depth.
bool wholePipelineDepth(const PartitionOptions& options) {
  return schedule::traits(options.schedule).split_backward;
}

// The bisection on T with one search; nothing where the search gave up. A feasible T
// is lowered to the bottleneck of the partition found there, which is also feasible, so
// the search moves between real stage times.
std::optional<GraphPartition> bisect(detail::StageGraphSearch& search, const graph::LayerGraph& graph,
                                     const ChainProblem& problem, int floor) {
  const int depth = search.solve(kInfinity);
  if (search.gaveUp()) return std::nullopt;
  if (depth == kNoPartition) {
    double need = 0;
    for (int l = 0; l < graph.size(); ++l)
      need = std::max(need, problem.stageMemoryBytes(problem.sumsOf({l}), 1, floor));
    throw Error("graph planner: no partition fits memory: a single layer needs up to " + text::humanBytes(need) +
                " under " + problem.options().schedule + " at micro-batch size " +
                std::to_string(problem.options().microbatch_size) +
                "; use a smaller micro-batch, a schedule that holds fewer micro-batches, or devices with more memory");
  }
  double high = search.partition().objective, low = 0;
  for (int round = 0; round < 64 && high - low > kBisectionTolerance * high; ++round) {
    const double mid = (low + high) / 2;
    const int depth = search.solve(mid);
    if (search.gaveUp()) return std::nullopt;
    if (depth != kNoPartition) {
      high = std::min(mid, search.partition().objective);
      continue;
    }
    low = mid;
    // The partition at `high` is often the optimum already (its bottleneck is a real
    // stage time, not the midpoint): one solve just below it proves that, where halving
    // the rest of the interval took some 20 solves that all fail.
    const double below = high * (1 - kBisectionTolerance);
    if (below <= low) break;
    if (search.solve(below) == kNoPartition) break;
    if (search.gaveUp()) return std::nullopt;
    high = search.partition().objective;
  }
  search.solve(high);
  if (search.gaveUp()) return std::nullopt;
  return search.partition();
}

// The search at one floor under the depths memory is sized for: every convex partition
// where the down-set search can afford it, else the tree's.
GraphPartition solveWithDepthFloor(const graph::LayerGraph& graph, const graph::SpTree& tree,
                                   const ChainProblem& problem, int floor, GraphSearch kind, int64_t max_steps) {
  std::optional<GraphPartition> result;
  if (kind == GraphSearch::kAuto)
    if (auto down_sets = detail::makeDownSetSearch(graph, problem, floor)) {
      result = bisect(*down_sets, graph, problem, floor);
      if (result) result->every_convex_partition = true;
    }
  if (!result) {
    SeriesParallelSearch search(graph, problem, tree, floor, max_steps);
    result = bisect(search, graph, problem, floor);
    if (!result)
      throw GraphSearchGaveUp("graph planner: the search over the series-parallel tree stopped at its budget of " +
                              std::to_string(problem.options().max_graph_steps) + " DP steps (" +
                              std::to_string(graph.size()) + " layers on " + std::to_string(problem.numDevices()) +
                              " devices); plan this model with the chain partitioner, or on fewer devices");
    result->search_steps = search.steps();
    result->notes = tree.linearised;
  }
  setDepths(*result, graph);
  return *result;
}

}  // namespace

GraphPartition solveGraph(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                          const PartitionOptions& options, GraphSearch search) {
  const ChainProblem problem(graph, cluster, options);
  const graph::SpTree tree = graph::seriesParallel(graph);
  // Deepen the floor until it covers the plan found.
  if (!wholePipelineDepth(options)) return solveWithDepthFloor(graph, tree, problem, 1, search, options.max_graph_steps);
  int64_t steps = 0;  // one budget for every floor's search
  for (int floor = 1;;) {
    GraphPartition p = solveWithDepthFloor(graph, tree, problem, floor, search, options.max_graph_steps - steps);
    steps += p.search_steps;
    p.search_steps = steps;
    if (p.depth <= floor) return p;
    floor = p.depth;
  }
}

bool fitsMemory(const GraphPartition& partition, const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                const PartitionOptions& options) {
  const ChainProblem problem(graph, cluster, options);
  for (const GraphStage& s : partition.stages) {
    const int depth = wholePipelineDepth(options) ? partition.depth : s.depth;
    if (problem.stageMemoryBytes(problem.sumsOf(s.layers), s.end_device - s.first_device, depth) >
        problem.deviceBlock(s.first_device, s.end_device).memory_bytes)
      return false;
  }
  return true;
}

plan::Plan toPlan(const GraphPartition& partition, const graph::LayerGraph& graph,
                  const cluster::ClusterSpec& cluster, const PartitionOptions& options,
                  const plan::ScheduleOptions& schedule) {
  plan::Plan plan;
  plan.microbatch_size = options.microbatch_size;
  plan.microbatches = options.microbatches;
  plan.schedule = schedule;
  for (const GraphStage& s : partition.stages) {
    plan::Stage stage;
    for (int l : s.layers) stage.layers.push_back(graph.layer(l).name);
    for (int d = s.first_device; d < s.end_device; ++d) stage.devices.push_back(cluster.device(d).name);
    plan.stages.push_back(std::move(stage));
  }
  return plan;
}

GraphPlan partitionGraph(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                         const PartitionOptions& options, const plan::ScheduleOptions& schedule,
                         GraphSearch search) {
  PartitionOptions o = options;
  o.extra_weight_buffers = plan::extraWeightBuffers(schedule);
  GraphPartition partition = solveGraph(graph, cluster, o, search);
  plan::Plan plan = toPlan(partition, graph, cluster, o, schedule);
  return {std::move(plan), std::move(partition)};
}

}  // namespace pipetrain::planner
