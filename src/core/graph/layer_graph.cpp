// LayerGraph construction: validation, stable topological sort, adjacency.
#include "pipetrain/graph/layer_graph.h"

#include <algorithm>
#include <functional>
#include <queue>

#include "pipetrain/util/error.h"

namespace pipetrain::graph {
namespace {

// Called when Kahn's algorithm leaves layers unsorted: every such layer still has an
// unsorted input, so walking inputs backwards must revisit a layer. The revisited
// stretch is a cycle; naming it tells the user exactly which edge to cut.
std::string describeCycle(const std::vector<Layer>& layers, const std::vector<std::vector<int>>& preds,
                          const std::vector<bool>& sorted) {
  int start = 0;
  while (sorted[start]) ++start;
  std::vector<int> seen_at(layers.size(), -1);
  std::vector<int> walk;
  int v = start;
  while (seen_at[v] < 0) {
    seen_at[v] = static_cast<int>(walk.size());
    walk.push_back(v);
    for (int p : preds[v])
      if (!sorted[p]) {
        v = p;
        break;
      }
  }
  // walk[seen_at[v]..] goes against the edges; print it along them.
  std::vector<int> cycle(walk.begin() + seen_at[v], walk.end());
  std::reverse(cycle.begin(), cycle.end());
  std::rotate(cycle.begin(), std::min_element(cycle.begin(), cycle.end()), cycle.end());  // start at the first listed
  std::string text;
  for (int c : cycle) text += "'" + layers[c].name + "' -> ";
  return text + "'" + layers[cycle.front()].name + "'";
}

}  // namespace

LayerGraph::LayerGraph(std::vector<Layer> layers, int64_t batch_size, std::string origin) : batch_size_(batch_size) {
  if (batch_size < 1) throw Error(origin + ": batch_size must be at least 1 (found " + std::to_string(batch_size) + ")");
  if (layers.empty()) throw Error(origin + ": the graph has no layers");

  const int n = static_cast<int>(layers.size());
  std::unordered_map<std::string, int> given_index;
  for (int i = 0; i < n; ++i) {
    const std::string& name = layers[i].name;
    if (name.empty()) throw Error(origin + ": layers[" + std::to_string(i) + "] has an empty name");
    auto [it, inserted] = given_index.emplace(name, i);
    if (!inserted)
      throw Error(origin + ": layer '" + name + "' is defined twice (layers[" + std::to_string(it->second) +
                  "] and layers[" + std::to_string(i) + "])");
  }

  // Adjacency in the given order first; the sort below renumbers it.
  std::vector<std::vector<int>> preds(n), succs(n);
  for (int i = 0; i < n; ++i) {
    for (const std::string& input : layers[i].inputs) {
      auto it = given_index.find(input);
      if (it == given_index.end())
        throw Error(origin + ": layer '" + layers[i].name + "' reads '" + input +
                    "', which is not a layer of this graph");
      if (std::find(preds[i].begin(), preds[i].end(), it->second) != preds[i].end())
        throw Error(origin + ": layer '" + layers[i].name + "' lists input '" + input + "' twice");
      preds[i].push_back(it->second);
      succs[it->second].push_back(i);
    }
  }

  // Kahn's algorithm, always taking the ready layer that was listed first: a given
  // order that is already topological comes out unchanged, so layer indices match
  // what the user wrote whenever possible.
  std::vector<int> pending(n);
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < n; ++i) {
    pending[i] = static_cast<int>(preds[i].size());
    if (pending[i] == 0) ready.push(i);
  }
  std::vector<int> order;
  std::vector<bool> sorted(n, false);
  while (!ready.empty()) {
    const int v = ready.top();
    ready.pop();
    order.push_back(v);
    sorted[v] = true;
    for (int s : succs[v])
      if (--pending[s] == 0) ready.push(s);
  }
  if (static_cast<int>(order.size()) != n)
    throw Error(origin + ": the layers form a cycle: " + describeCycle(layers, preds, sorted));

  std::vector<int> new_index(n);
  for (int k = 0; k < n; ++k) new_index[order[k]] = k;
  layers_.reserve(n);
  preds_.resize(n);
  succs_.resize(n);
  for (int k = 0; k < n; ++k) {
    const int old = order[k];
    layers_.push_back(std::move(layers[old]));
    index_[layers_.back().name] = k;
    for (int p : preds[old]) preds_[k].push_back(new_index[p]);
  }
  for (int k = 0; k < n; ++k)
    for (int p : preds_[k]) succs_[p].push_back(k);  // ascending k: successors in topological order
}

int LayerGraph::indexOf(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : it->second;
}

bool LayerGraph::isChain() const {
  for (int i = 0; i < size(); ++i) {
    if (i == 0 ? !preds_[i].empty() : preds_[i] != std::vector<int>{i - 1}) return false;
  }
  return true;
}

LayerGraph LayerGraph::uniformChain(int n, double forward_seconds, double backward_input_seconds,
                                    double backward_weight_seconds, int64_t output_bytes, int64_t param_bytes) {
  if (n < 1) throw Error("uniform chain: needs at least one layer (found " + std::to_string(n) + ")");
  std::vector<Layer> layers;
  for (int i = 0; i < n; ++i) {
    Layer l;
    l.name = "layer" + std::to_string(i);
    l.kind = "layer";
    if (i > 0) l.inputs = {layers.back().name};
    l.forward_seconds = forward_seconds;
    l.backward_input_seconds = backward_input_seconds;
    l.backward_weight_seconds = backward_weight_seconds;
    l.output_bytes = output_bytes;
    l.saved_activation_bytes = output_bytes;
    l.param_bytes = param_bytes;
    l.optimizer_state_bytes = 2 * param_bytes;
    layers.push_back(std::move(l));
  }
  return LayerGraph(std::move(layers), 1, "uniform chain");
}

void LayerGraph::setOverlapFactor(double factor) {
  if (!(factor >= 0.5 && factor <= 1.0))
    throw Error("overlap_factor must lie between 0.5 (forward and backward fully overlapped) and 1 (no gain), got " +
                std::to_string(factor));
  overlap_factor_ = factor;
}

}  // namespace pipetrain::graph
