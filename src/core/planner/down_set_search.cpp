// The exact search over every convex partition, for models with few down-sets.
//
// Why down-sets: list a stage graph's stages in a topological order S1 … Sk. Every
// prefix S1 ∪ … ∪ Si is then a down-set of the layer graph (it holds each of its layers'
// producers), and conversely the differences of any chain of down-sets ∅ ⊂ D1 ⊂ … ⊂ V
// are convex stages with an acyclic stage graph. Stages sit on consecutive device blocks
// in that order, as the chain DP and the series-parallel search lay them out, so the
// search space is every convex partition under that layout.
//
// The DP runs from the pipeline's end: a state is a down-set D still to be placed on
// devices [0, d) (tiled exactly), and where and how deep the stages already placed that
// D's layers feed are: the next stage's depth sizes its in-flight memory, and its
// messages are priced on the routes to those stages' first devices. A step places the
// last stage S = D \ D' on a block [a, d) for some down-set D' ⊂ D.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "stage_graph_search.h"

namespace pipetrain::planner::detail {
namespace {

using Mask = uint64_t;
constexpr int kMaxLayers = 64;
constexpr int kMaxDownSets = 256;
// Transitions times device pairs: above this a solve() would take tens of milliseconds,
// and solveGraph runs several of them per plan (the bisection's).
constexpr double kMaxWork = 1e6;
// States solved over all solves (a state solved again under another limit counts
// again): the ways already placed stages can sit are not known ahead, and wide graphs
// on many devices have too many (multimodal's 627 down-sets on 4 devices took 3 s).
// Past this the search gives up for the tree's.
constexpr std::size_t kMaxStates = 200000;

// Transitions tried over all solves (about 4 million a second here): past this the
// search gives up for the tree's. Since the memo outlives a solve, kMaxStates alone let
// candle-uno's searches on 64 devices run to 1 million transitions (0.3 s each) inside
// a 1,024-device exploration whose plan none of them changed.
constexpr int64_t kMaxSteps = 300'000;

Mask bit(int layer) { return Mask{1} << layer; }

// Placing stage S = D \ D' on the devices before what is placed already.
struct Step {
  int lower;          // index of D'
  Mask stage;         // S
  StageSums sums;
};

// Of a layer outside the down-set that reads from it: its stage's depth and first device.
struct Placed {
  int depth = 0, first_device = 0;
};
using Boundary = std::vector<Placed>;  // per layer of boundary_[down-set]

struct Entry {
  int depth = kNoPartition;  // deepest of the stages placed for this state
  int step = -1;             // index into steps_of_[down-set]
  int first_device = 0;      // the stage's block is [first_device, d)
  double worst = 0;          // the slowest stage or transfer placed for this state
  double solved_at = 0;      // the limit it was found under
};

class DownSetSearch final : public StageGraphSearch {
 public:
  DownSetSearch(const graph::LayerGraph& graph, const ChainProblem& problem, int depth_floor, std::vector<Mask> sets)
      : graph_(graph), problem_(problem), depth_floor_(depth_floor), sets_(std::move(sets)) {
    const int n = graph.size();
    for (int l = 0; l < n; ++l) {
      Mask preds = 0;
      for (int p : graph.predecessors(l)) preds |= bit(p);
      preds_.push_back(preds);
    }
    steps_of_.resize(sets_.size());
    boundary_.resize(sets_.size());
    for (std::size_t i = 0; i < sets_.size(); ++i) {
      const Mask d = sets_[i];
      if (d == full()) full_ = static_cast<int>(i);
      for (int l = 0; l < n; ++l)
        if (!(d & bit(l)) && (preds_[l] & d)) boundary_[i].push_back(l);
      for (std::size_t j = 0; j < sets_.size(); ++j) {
        if (j == i || (sets_[j] & ~d)) continue;
        Step step{static_cast<int>(j), d & ~sets_[j], {}};
        std::vector<int> layers;
        for (int l = 0; l < n; ++l)
          if (step.stage & bit(l)) layers.push_back(l);
        step.sums = problem.sumsOf(layers);
        steps_of_[i].push_back(step);
      }
    }
    starts_.resize(problem.numDevices() + 1);
    for (int end = 1; end <= problem.numDevices(); ++end) starts_[end] = problem.allowedStarts(end);
  }

  bool gaveUp() const override { return solved_ > kMaxStates || steps_ > kMaxSteps; }
  int64_t steps() const override { return steps_; }

  // The memo outlives a solve: a state solved under one limit keeps its answer under a
  // lower one that its stages still meet (stillHolds), so the bisection's solves, which
  // mostly tighten the limit, reuse most of it.
  int solve(double limit) override {
    limit_ = limit;
    used_ = 0;
    int depth = kNoPartition;
    for (int e = 1; e <= problem_.numDevices(); ++e) {
      const int d = best(full_, e, {});
      if (d < depth) depth = d, used_ = e;
    }
    return depth;
  }

  GraphPartition partition() override {
    GraphPartition p;
    int set = full_, end = used_;
    Boundary placed;
    while (sets_[set] != 0) {
      best(set, end, placed);  // an entry of an earlier solve may need solving again under this limit
      const Entry e = memo_.at(key(set, end, placed));
      const Step& step = steps_of_[set][e.step];
      const int depth = stageDepth(set, step.stage, placed);
      GraphStage stage{{}, e.first_device, end, depth};
      for (int l = 0; l < graph_.size(); ++l)
        if (step.stage & bit(l)) stage.layers.push_back(l);
      p.stages.push_back(stage);
      const DeviceBlock block = problem_.deviceBlock(e.first_device, end);
      p.objective = std::max({p.objective, problem_.stageSeconds(step.sums, block, problem_.recomputesAll()),
                              transferSeconds(set, step, end, placed)});
      placed = lowerBoundary(set, step, placed, {depth, e.first_device});
      set = step.lower;
      end = e.first_device;
    }
    std::reverse(p.stages.begin(), p.stages.end());
    return p;
  }

 private:
  Mask full() const { return graph_.size() == kMaxLayers ? ~Mask{0} : bit(graph_.size()) - 1; }

  static std::string key(int set, int end, const Boundary& placed) {
    std::string k(reinterpret_cast<const char*>(&set), sizeof set);
    k.append(reinterpret_cast<const char*>(&end), sizeof end);
    for (const Placed& p : placed) k.append(reinterpret_cast<const char*>(&p), sizeof p);
    return k;
  }

  // 1 + the deepest placed stage that `stage` (part of down-set `set`) feeds.
  int stageDepth(int set, Mask stage, const Boundary& placed) const {
    int depth = 1;
    for (std::size_t k = 0; k < boundary_[set].size(); ++k)
      if (preds_[boundary_[set][k]] & stage) depth = std::max(depth, 1 + placed[k].depth);
    return depth;
  }

  // The boundary of the down-set before `step`, once its stage is placed as `stage`.
  Boundary lowerBoundary(int set, const Step& step, const Boundary& placed, Placed stage) const {
    std::vector<Placed> by_layer(graph_.size());
    for (std::size_t k = 0; k < boundary_[set].size(); ++k) by_layer[boundary_[set][k]] = placed[k];
    Boundary out;
    for (int l : boundary_[step.lower]) out.push_back(step.stage & bit(l) ? stage : by_layer[l]);
    return out;
  }

  // Seconds per mini-batch of the stage's messages to the stages after it, one per
  // consumer stage with the outputs it reads (as the runtime sends them), each on the
  // route from the stage's last device to the consumer's first, one after another.
  double transferSeconds(int set, const Step& step, int end, const Boundary& placed) const {
    double seconds = 0;
    std::vector<int> consumers;  // first devices of the stages already priced
    for (std::size_t k = 0; k < boundary_[set].size(); ++k) {
      const Mask producers = preds_[boundary_[set][k]] & step.stage;
      const int to = placed[k].first_device;
      if (!producers || std::find(consumers.begin(), consumers.end(), to) != consumers.end()) continue;
      consumers.push_back(to);
      Mask read = 0;  // what this consumer stage reads from the stage
      for (std::size_t q = k; q < boundary_[set].size(); ++q)
        if (placed[q].first_device == to) read |= preds_[boundary_[set][q]] & step.stage;
      double bytes = 0;
      for (int l = 0; l < graph_.size(); ++l)
        if (read & bit(l)) bytes += problem_.outputBytes(l);
      seconds += problem_.messagesSeconds(bytes, end - 1, to);
    }
    return seconds;
  }

  int best(int set, int end, const Boundary& placed) {
    if (sets_[set] == 0) return end == 0 ? 0 : kNoPartition;
    if (gaveUp()) return kNoPartition;
    const std::string k = key(set, end, placed);
    if (auto it = memo_.find(k); it != memo_.end() && stillHolds(it->second, limit_)) return it->second.depth;
    ++solved_;
    Entry result;
    result.solved_at = limit_;
    for (std::size_t s = 0; s < steps_of_[set].size(); ++s) {
      ++steps_;
      const Step& step = steps_of_[set][s];
      const double transfer = transferSeconds(set, step, end, placed);
      if (transfer > limit_) continue;
      const int depth = stageDepth(set, step.stage, placed);
      if (depth >= result.depth) continue;
      const bool first = sets_[step.lower] == 0;
      for (int a : starts_[end]) {  // from the last device down, as allowedDevices allows
        if (first ? a != 0 : a == 0) continue;  // the first stage starts at device 0, no other does
        ++steps_;
        const DeviceBlock block = problem_.deviceBlock(a, end);
        const double seconds = problem_.stageSeconds(step.sums, block, problem_.recomputesAll());
        if (seconds > limit_) continue;
        if (problem_.options().check_memory &&
            problem_.stageMemoryBytes(step.sums, block.replicas(), std::max(depth, depth_floor_)) > block.memory_bytes)
          continue;
        const Boundary lower = lowerBoundary(set, step, placed, {depth, a});
        const int rest = best(step.lower, a, lower);
        if (rest != kNoPartition && std::max(depth, rest) < result.depth)
          result = {std::max(depth, rest), static_cast<int>(s), a,
                    std::max({seconds, transfer, worstOf(step.lower, a, lower)}), limit_};
      }
    }
    memo_[k] = result;
    return result.depth;
  }

  // The slowest stage or transfer placed for a state, once best() has solved it.
  double worstOf(int set, int end, const Boundary& placed) const {
    if (sets_[set] == 0) return 0;
    return memo_.at(key(set, end, placed)).worst;
  }

  const graph::LayerGraph& graph_;
  const ChainProblem& problem_;
  const int depth_floor_;
  std::vector<Mask> sets_;                   // every down-set
  std::vector<Mask> preds_;                  // per layer
  std::vector<std::vector<Step>> steps_of_;  // per down-set: every smaller down-set
  std::vector<std::vector<int>> boundary_;   // per down-set: the layers outside it that read from it
  std::vector<std::vector<int>> starts_;     // per end device: ChainProblem::allowedStarts, descending
  int full_ = 0;                             // the index of the set of all layers
  std::unordered_map<std::string, Entry> memo_;  // of every solve so far
  std::size_t solved_ = 0;                       // states solved, over all solves
  int64_t steps_ = 0;  // transitions tried over all solves (kMaxSteps)
  double limit_ = 0;
  int used_ = 0;
};

// Every down-set of the graph, or nothing when there are more than kMaxDownSets.
std::vector<Mask> downSets(const graph::LayerGraph& graph) {
  std::vector<Mask> sets{0};
  std::unordered_set<Mask> seen{0};
  for (std::size_t i = 0; i < sets.size(); ++i)
    for (int l = 0; l < graph.size(); ++l) {
      if (sets[i] & bit(l)) continue;
      bool ready = true;
      for (int p : graph.predecessors(l)) ready = ready && (sets[i] & bit(p));
      if (!ready || !seen.insert(sets[i] | bit(l)).second) continue;
      if (static_cast<int>(sets.size()) == kMaxDownSets) return {};
      sets.push_back(sets[i] | bit(l));
    }
  return sets;
}

}  // namespace

std::unique_ptr<StageGraphSearch> makeDownSetSearch(const graph::LayerGraph& graph, const ChainProblem& problem,
                                                    int depth_floor) {
  if (graph.size() > kMaxLayers) return nullptr;
  std::vector<Mask> sets = downSets(graph);
  if (sets.empty()) return nullptr;
  const double devices = problem.numDevices();
  const double most_pairs = kMaxWork / (devices * devices);
  double pairs = 0;
  for (Mask a : sets)
    for (Mask b : sets)
      if (a != b && !(b & ~a) && ++pairs > most_pairs) return nullptr;
  return std::make_unique<DownSetSearch>(graph, problem, depth_floor, std::move(sets));
}

}  // namespace pipetrain::planner::detail
