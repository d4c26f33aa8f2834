#include "pipetrain/planner/oracle.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <unordered_map>

#include "explorer.h"
#include "pipetrain/planner/neighbours.h"
#include "pipetrain/planner/replicated_pipeline.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/util/error.h"

namespace pipetrain::planner {
namespace {

// A plan of the oracle's space: `copies` copies of the chain `runs` on copy 0's devices.
struct Shape {
  int copies = 1;
  ChainRuns runs;
};

class Search {
 public:
  Search(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster, const OracleOptions& o)
      : graph_(graph), cluster_(cluster), o_(o) {
    if (schedule::multiStage(schedule::traits(o.schedule)))
      throw Error("the oracle searches schedules with one stage per rank, not " + o.schedule);
    if (o.microbatches < 1 || o.microbatch_size < 1) throw Error("the oracle needs micro-batches of at least 1 sample");
    for (int c = 1; c <= std::min(cluster.size(), o.microbatches); ++c)
      if (o.microbatches % c == 0) copy_counts_.push_back(c);
  }

  const std::vector<int>& copyCounts() const { return copy_counts_; }
  int width(int copies) const { return cluster_.size() / copies; }
  bool exhausted() const { return result_.simulated >= o_.max_simulations; }
  OracleResult& result() { return result_; }

  // The shape's simulated samples/s, or 0 where it cannot run or misses its memory.
  double score(const Shape& s) {
    const std::string key = keyOf(s);
    if (auto it = scores_.find(key); it != scores_.end()) return it->second;
    double throughput = 0;
    if (!exhausted()) {
      ++result_.simulated;
      try {
        plan::Plan p = planOf(s);
        plan::validate(p, graph_, cluster_, "oracle", std::vector<int64_t>(p.numStages(), 0));
        sim::Report r = sim::predictReport(graph_, cluster_, p);
        if (detail::memoryShortfall(r).empty()) {
          throughput = r.throughput;
          if (!result_.best || throughput > result_.report.throughput) {
            result_.best = std::move(p);
            result_.report = std::move(r);
          }
        }
      } catch (const Error&) {
        // the schedule cannot split the micro-batches so: not a plan
      }
    }
    return scores_[key] = throughput;
  }

  plan::Plan planOf(const Shape& s) const {
    plan::Plan like;
    like.schedule.name = o_.schedule;
    like.microbatch_size = o_.microbatch_size;
    like.microbatches = o_.microbatches / s.copies;
    return replicatePipeline(planOfRuns(like, s.runs, graph_, cluster_), s.copies, width(s.copies), cluster_);
  }

  // The shape of `plan` where it is one of the space.
  std::optional<Shape> shapeOf(const plan::Plan& plan) const {
    if (plan.schedule.name != o_.schedule || plan.microbatch_size != o_.microbatch_size ||
        plan.microbatches != o_.microbatches)
      return std::nullopt;
    const std::optional<CopiedPipeline> copied = copiedPipeline(plan, cluster_);
    const int copies = copied ? copied->copies : 1;
    if (copied && copied->width != width(copies)) return std::nullopt;
    const std::optional<ChainRuns> runs = chainRuns(copied ? copied->pipeline : plan, graph_, cluster_);
    if (!runs || runs->device.back() > width(copies)) return std::nullopt;
    return Shape{copies, *runs};
  }

  // One step from `s` to every shape a move reaches (see oracle.h).
  std::vector<Shape> moves(const Shape& s) const {
    std::vector<Shape> out;
    const std::vector<int>& L = s.runs.layer;
    const std::vector<int>& D = s.runs.device;
    const int k = s.runs.numStages(), w = width(s.copies);
    auto add = [&](std::vector<int> layer, std::vector<int> device) { out.push_back({s.copies, {layer, device}}); };
    for (int i = 1; i < k; ++i)
      for (int step = 1; step < graph_.size(); step *= 2)
        for (int sign : {-1, 1}) {
          std::vector<int> layer = L;
          layer[i] += sign * step;
          if (layer[i] > L[i - 1] && layer[i] < L[i + 1]) add(layer, D);
          std::vector<int> device = D;
          device[i] += sign * step;
          if (device[i] > D[i - 1] && device[i] < D[i + 1]) add(L, device);
        }
    for (int step = 1; step <= w; step *= 2)
      for (int sign : {-1, 1}) {
        std::vector<int> device = D;
        device[k] += sign * step;
        if (device[k] > D[k - 1] && device[k] <= w) add(L, device);
      }
    for (int i = 0; i < k; ++i) {
      // Split stage i: at up to 16 layers spread over it, its devices halved (or, on one
      // device, the later stages moved one device on where one is idle).
      const int layers = L[i + 1] - L[i], devices = D[i + 1] - D[i];
      if (layers < 2 || (devices < 2 && D[k] >= w)) continue;
      const int cuts = std::min(layers - 1, 16);
      for (int c = 1; c <= cuts; ++c) {
        std::vector<int> layer = L, device = D;
        layer.insert(layer.begin() + i + 1, L[i] + c * layers / (cuts + 1));
        if (layer[i + 1] == layer[i] || layer[i + 1] == layer[i + 2]) continue;
        if (devices >= 2) {
          device.insert(device.begin() + i + 1, D[i] + devices / 2);
        } else {
          device.insert(device.begin() + i + 1, D[i] + 1);
          for (std::size_t j = i + 2; j < device.size(); ++j) ++device[j];
        }
        add(layer, device);
      }
    }
    for (int i = 0; i + 1 < k; ++i) {
      std::vector<int> layer = L, device = D;
      layer.erase(layer.begin() + i + 1);
      device.erase(device.begin() + i + 1);
      add(layer, device);
    }
    return out;
  }

  // Climbs from `s` to better moves, the first found in a random order each step.
  void walk(Shape s, std::mt19937_64& rng) {
    ++result_.walks;
    double current = score(s);
    if (current <= 0) return;
    while (!exhausted()) {
      std::vector<Shape> next = moves(s);
      std::shuffle(next.begin(), next.end(), rng);
      bool moved = false;
      for (const Shape& n : next) {
        const double v = score(n);
        if (v > current * std::exp(detail::kTie)) {  // faster by more than a tie
          s = n;
          current = v;
          moved = true;
          break;
        }
        if (exhausted()) break;
      }
      if (!moved) return;
    }
  }

  Shape randomShape(int copies, std::mt19937_64& rng) const {
    const int w = width(copies);
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int k = uniform(1, std::min(w, graph_.size()));
    const int n = uniform(k, w);
    return {copies, {randomSplit(graph_.size(), k, rng), randomSplit(n, k, rng)}};
  }

 private:
  static std::vector<int> randomSplit(int n, int k, std::mt19937_64& rng) {
    std::vector<int> cuts;
    for (int i = 1; i < n; ++i) cuts.push_back(i);
    std::shuffle(cuts.begin(), cuts.end(), rng);
    cuts.resize(k - 1);
    cuts.push_back(0);
    cuts.push_back(n);
    std::sort(cuts.begin(), cuts.end());
    return cuts;
  }

  static std::string keyOf(const Shape& s) {
    std::string key = std::to_string(s.copies) + ":";
    for (int l : s.runs.layer) key += std::to_string(l) + ",";
    key += ":";
    for (int d : s.runs.device) key += std::to_string(d) + ",";
    return key;
  }

  const graph::LayerGraph& graph_;
  const cluster::ClusterSpec& cluster_;
  const OracleOptions& o_;
  std::vector<int> copy_counts_;  // those dividing the micro-batches
  std::unordered_map<std::string, double> scores_;
  OracleResult result_;
};

}  // namespace

OracleResult searchEveryPlan(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                             const OracleOptions& options) {
  Search search(graph, cluster, options);
  const int layers = graph.size();
  double plans = 0;
  for (int copies : search.copyCounts())
    for (int k = 1; k <= std::min(layers, search.width(copies)); ++k)
      for (int n = k; n <= search.width(copies); ++n) plans += splitCount(layers, k) * splitCount(n, k);
  if (plans > static_cast<double>(options.max_simulations))
    throw Error("the oracle's space holds " + std::to_string(static_cast<int64_t>(plans)) + " plans, more than the " +
                std::to_string(options.max_simulations) + " it may simulate");
  const auto every = static_cast<std::size_t>(options.max_simulations);
  for (int copies : search.copyCounts())
    for (int k = 1; k <= std::min(layers, search.width(copies)); ++k) {
      const std::vector<std::vector<int>> layer_splits = everySplit(layers, k, every);
      for (int n = k; n <= search.width(copies); ++n)
        for (const std::vector<int>& device : everySplit(n, k, every))
          for (const std::vector<int>& layer : layer_splits) search.score({copies, {layer, device}});
    }
  return std::move(search.result());
}

OracleResult searchLocally(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                           const OracleOptions& options, const std::vector<plan::Plan>& starts) {
  Search search(graph, cluster, options);
  std::mt19937_64 rng(options.seed);
  for (const plan::Plan& start : starts)
    if (auto shape = search.shapeOf(start); shape && !search.exhausted()) search.walk(*shape, rng);
  const std::vector<int>& copies = search.copyCounts();
  for (int r = 0; r < options.restarts && !search.exhausted(); ++r)
    search.walk(search.randomShape(copies[r % copies.size()], rng), rng);
  return std::move(search.result());
}

}  // namespace pipetrain::planner
