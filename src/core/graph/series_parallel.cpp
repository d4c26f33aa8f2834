#include "pipetrain/graph/series_parallel.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <unordered_map>

namespace pipetrain::graph {
namespace {

class Decomposer {
 public:
  explicit Decomposer(const LayerGraph& g) : g_(g), position_(g.size(), -1) {}

  SpTree run() {
    std::vector<int> all(g_.size());
    std::iota(all.begin(), all.end(), 0);
    tree_.root = decompose(all);
    const int decomposed = static_cast<int>(tree_.nodes.size());
    for (int v = 0; v < decomposed; ++v)
      if (tree_.nodes[v].kind == SpNode::Kind::kSeries) addJoins(v);
    return std::move(tree_);
  }

 private:
  int add(SpNode node) {
    tree_.nodes.push_back(std::move(node));
    return static_cast<int>(tree_.nodes.size()) - 1;
  }

  // `region`: layer indices in topological order.
  int decompose(const std::vector<int>& region) {
    if (region.size() == 1) return add({SpNode::Kind::kLayer, region[0], {}, region});
    const int n = static_cast<int>(region.size());
    for (int p = 0; p < n; ++p) position_[region[p]] = p;
    const auto at = [&](int layer) {  // the layer's position, -1 when outside the region
      const int p = position_[layer];
      return p >= 0 && p < n && region[p] == layer ? p : -1;
    };
    // jumped[p] > 0: some edge passes over position p. Edges from outside the region (or
    // from the model input) start at -1; edges leaving it (or the model output) end at n.
    std::vector<int> jumped(n + 1, 0);
    const auto edge = [&](int from, int to) {
      if (to - from >= 2) ++jumped[from + 1], --jumped[to];
    };
    for (int p = 0; p < n; ++p) {
      const int l = region[p];
      bool from_outside = g_.predecessors(l).empty(), to_outside = g_.successors(l).empty();
      for (int q : g_.predecessors(l)) from_outside |= at(q) < 0;
      for (int s : g_.successors(l)) {
        if (at(s) < 0) to_outside = true;
        else edge(p, at(s));
      }
      if (from_outside) edge(-1, p);
      if (to_outside) edge(p, n);
    }
    std::vector<int> series_points;
    for (int p = 0, running = 0; p < n; ++p)
      if ((running += jumped[p]) == 0) series_points.push_back(p);

    if (!series_points.empty()) {
      SpNode node{SpNode::Kind::kSeries, -1, {}, region};
      int begin = 0;
      for (int p : series_points) {
        if (p > begin) node.children.push_back(decompose({region.begin() + begin, region.begin() + p}));
        node.children.push_back(add({SpNode::Kind::kLayer, region[p], {}, {region[p]}}));
        begin = p + 1;
      }
      if (begin < n) node.children.push_back(decompose({region.begin() + begin, region.end()}));
      return add(std::move(node));
    }
    std::vector<std::vector<int>> parts = components(region, at);
    if (parts.size() > 1) {
      SpNode node{SpNode::Kind::kParallel, -1, {}, region};
      for (const auto& part : parts) node.children.push_back(decompose(part));
      node.by_level = byLevel(region);
      return add(std::move(node));
    }
    tree_.linearised.push_back("layers '" + g_.layer(region.front()).name + "' .. '" + g_.layer(region.back()).name +
                               "' (" + std::to_string(n) + " layers) are not series-parallel: their branches are "
                               "joined inside the part, so they are planned as a chain in topological order");
    SpNode node{SpNode::Kind::kSeries, -1, {}, region};
    for (int l : region) node.children.push_back(add({SpNode::Kind::kLayer, l, {}, {l}}));
    return add(std::move(node));
  }

  // The region's layers as a series, ordered by their longest distance from its entry
  // (then topologically): a topological order that interleaves the branches.
  int byLevel(const std::vector<int>& region) {
    std::vector<std::pair<int, int>> order;  // (level, layer)
    std::unordered_map<int, int> level;
    for (int l : region) {  // topological order: predecessors first
      int lv = 0;
      for (int q : g_.predecessors(l)) {
        auto it = level.find(q);
        if (it != level.end()) lv = std::max(lv, it->second + 1);
      }
      level[l] = lv;
      order.push_back({lv, l});
    }
    std::sort(order.begin(), order.end());
    SpNode node{SpNode::Kind::kSeries, -1, {}, region};
    for (const auto& [lv, l] : order) node.children.push_back(add({SpNode::Kind::kLayer, l, {}, {l}}));
    return add(std::move(node));
  }

  // SpNode::joins of series node v.
  void addJoins(int v) {
    const std::vector<int> children = tree_.nodes[v].children;  // add() may move the nodes
    for (int c = 0; c + 1 < static_cast<int>(children.size()); ++c) {
      const SpNode parallel = tree_.nodes[children[c]];
      if (parallel.kind != SpNode::Kind::kParallel) continue;
      const int branches = static_cast<int>(parallel.children.size());
      for (int k = 1; k < branches; ++k) {
        SpNode series{SpNode::Kind::kSeries, -1, {}, {}};
        if (k + 1 == branches) {
          const SpNode& branch = tree_.nodes[parallel.children[k]];
          series.children = branch.kind == SpNode::Kind::kSeries ? branch.children : std::vector<int>{parallel.children[k]};
        } else {
          SpNode joined{SpNode::Kind::kParallel, -1, {parallel.children.begin() + k, parallel.children.end()}, {}};
          for (int b : joined.children) append(joined.layers, tree_.nodes[b].layers);
          std::sort(joined.layers.begin(), joined.layers.end());
          series.children = {add(std::move(joined))};
        }
        series.children.insert(series.children.end(), children.begin() + c + 1, children.end());
        for (int child : series.children) append(series.layers, tree_.nodes[child].layers);
        std::sort(series.layers.begin(), series.layers.end());
        const int added = add(std::move(series));
        tree_.nodes[v].joins.push_back({c, k, added});
      }
    }
  }

  static void append(std::vector<int>& to, const std::vector<int>& more) { to.insert(to.end(), more.begin(), more.end()); }

  // Weakly connected parts of the region (edges inside it only), each in topological
  // order, ordered by their first layer.
  template <typename At>
  std::vector<std::vector<int>> components(const std::vector<int>& region, const At& at) {
    const int n = static_cast<int>(region.size());
    std::vector<int> parent(n);
    std::iota(parent.begin(), parent.end(), 0);
    const std::function<int(int)> find = [&](int x) { return parent[x] == x ? x : parent[x] = find(parent[x]); };
    for (int p = 0; p < n; ++p)
      for (int s : g_.successors(region[p]))
        if (at(s) >= 0) parent[find(p)] = find(at(s));
    std::vector<std::vector<int>> parts;
    std::vector<int> part_of_root(n, -1);
    for (int p = 0; p < n; ++p) {
      int& k = part_of_root[find(p)];
      if (k < 0) {
        k = static_cast<int>(parts.size());
        parts.emplace_back();
      }
      parts[k].push_back(region[p]);
    }
    return parts;
  }

  const LayerGraph& g_;
  std::vector<int> position_;  // scratch: a layer's position in the region being decomposed
  SpTree tree_;
};

}  // namespace

SpTree seriesParallel(const LayerGraph& graph) { return Decomposer(graph).run(); }

bool hasBranches(const SpTree& tree) {
  for (const SpNode& node : tree.nodes)
    if (node.kind == SpNode::Kind::kParallel) return true;
  return false;
}

}  // namespace pipetrain::graph
