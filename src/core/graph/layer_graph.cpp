// LayerGraph construction: validation, stable topological sort, adjacency.
#include "pipetrain/graph/layer_graph.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <queue>

#include "pipetrain/util/error.h"
#include "pipetrain/util/limits.h"

namespace pipetrain::graph {
namespace {

// An engine call beyond its work costs microseconds on a CPU (4 us measured); a figure of
// 10 ms is a mistake, and it would be charged to every backward action.
constexpr double kMaxBackwardCallSeconds = 0.01;

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

// Checks a layer's other batch sizes and sorts them, smallest first.
void checkOtherBatches(Layer& l, int64_t batch_size, const std::string& origin) {
  const std::string where = origin + ": layer '" + l.name + "'";
  for (const TimedAtBatch& t : l.other_batches) {
    const std::string at = where + ", other_batches at " + std::to_string(t.batch);
    if (t.batch < 1) throw Error(where + ": other_batches: batch must be at least 1 (found " + std::to_string(t.batch) + ")");
    if (t.batch == batch_size) throw Error(at + ": the graph's own batch_size; its times are the layer's fields");
    for (double s : {t.seconds.forward, t.seconds.backward_input, t.seconds.backward_weight, t.seconds.split_weight,
                     t.seconds.forward_no_grad})
      if (!(s >= 0 && s < std::numeric_limits<double>::infinity()))
        throw Error(at + ": times must be non-negative and finite seconds");
  }
  std::sort(l.other_batches.begin(), l.other_batches.end(),
            [](const TimedAtBatch& a, const TimedAtBatch& b) { return a.batch < b.batch; });
  for (std::size_t i = 1; i < l.other_batches.size(); ++i)
    if (l.other_batches[i].batch == l.other_batches[i - 1].batch)
      throw Error(where + ": other_batches lists batch " + std::to_string(l.other_batches[i].batch) + " twice");
}

PassSeconds scaled(const PassSeconds& s, double factor) {
  return {s.forward * factor, s.backward_input * factor, s.backward_weight * factor, s.split_weight * factor,
          s.forward_no_grad * factor};
}

// Above the largest size timed (`top`, timed at `top_batch`), at `batch` samples: the line
// through the two largest sizes carried on (a cost fixed per pass and one per sample),
// kept between what the largest took (a pass cannot get cheaper with more samples) and
// that in proportion to the samples (as if nothing in it were fixed). In proportion
// alone, a layer whose weights dominate (torchvision's vgg11 classifier, which streams
// its weights every pass) was priced far too dear, and its plans predicted a third slow
// (docs/predictions.md, "Above the largest size timed"). Timed at one size only (`next`
// null), in proportion.
PassSeconds beyondLargest(const PassSeconds& top, int64_t top_batch, const TimedAtBatch* next, double batch) {
  const double grown = batch / static_cast<double>(top_batch);
  if (!next) return scaled(top, grown);
  const double span = static_cast<double>(top_batch - next->batch), beyond = batch - static_cast<double>(top_batch);
  auto carry = [&](double at_top, double at_next) {
    return std::clamp(at_top + (at_top - at_next) / span * beyond, at_top, at_top * grown);
  };
  const PassSeconds& x = next->seconds;
  return {carry(top.forward, x.forward), carry(top.backward_input, x.backward_input),
          carry(top.backward_weight, x.backward_weight), carry(top.split_weight, x.split_weight),
          carry(top.forward_no_grad, x.forward_no_grad)};
}

}  // namespace

void Layer::scaleTimes(double factor) {
  for (double* seconds : {&forward_seconds, &backward_input_seconds, &backward_weight_seconds, &split_weight_seconds,
                          &forward_no_grad_seconds, &optimizer_seconds, &weight_versions.swap, &weight_versions.stash,
                          &weight_versions.correction})
    if (*seconds >= 0) *seconds *= factor;  // -1: never timed, taken from another figure
  for (TimedAtBatch& other : other_batches) other.seconds = scaled(other.seconds, factor);
}

int64_t LayerGraph::smallestTimedBatch() const {
  int64_t smallest = batch_size_;
  for (const Layer& l : layers_)
    if (!l.other_batches.empty()) smallest = std::min(smallest, l.other_batches.front().batch);  // sorted
  return smallest;
}

PassSeconds LayerGraph::secondsAt(int index, int64_t batch) const {
  const Layer& l = layers_[index];
  const double b = static_cast<double>(batch);
  // The timed sizes nearest `batch` from above and the two nearest from below, among the
  // graph's own and the layer's others (the constructor checked that none repeats).
  const TimedAtBatch own{batch_size_, l.passSeconds()};
  const TimedAtBatch *below = nullptr, *next_below = nullptr, *above = nullptr;
  auto consider = [&](const TimedAtBatch& p) {
    if (p.batch <= batch) {
      if (!below || p.batch > below->batch) {
        next_below = below;
        below = &p;
      } else if (!next_below || p.batch > next_below->batch) {
        next_below = &p;
      }
    }
    if (p.batch >= batch && (!above || p.batch < above->batch)) above = &p;
  };
  consider(own);
  for (const TimedAtBatch& p : l.other_batches) consider(p);
  if (!below) return scaled(above->seconds, b / static_cast<double>(above->batch));
  if (!above) return beyondLargest(below->seconds, below->batch, next_below, b);
  if (below == above) return below->seconds;
  const double w = (b - static_cast<double>(below->batch)) / static_cast<double>(above->batch - below->batch);
  auto mix = [w](double x, double y) { return x + w * (y - x); };
  const PassSeconds &x = below->seconds, &y = above->seconds;
  return {mix(x.forward, y.forward), mix(x.backward_input, y.backward_input), mix(x.backward_weight, y.backward_weight),
          mix(x.split_weight, y.split_weight), mix(x.forward_no_grad, y.forward_no_grad)};
}

LayerGraph::LayerGraph(std::vector<Layer> layers, int64_t batch_size, std::string origin) : batch_size_(batch_size) {
  if (batch_size < 1) throw Error(origin + ": batch_size must be at least 1 (found " + std::to_string(batch_size) + ")");
  if (layers.empty()) throw Error(origin + ": the graph has no layers");

  const int n = static_cast<int>(layers.size());
  std::unordered_map<std::string, int> given_index;
  for (int i = 0; i < n; ++i) {
    const std::string& name = layers[i].name;
    if (name.empty()) throw Error(origin + ": layers[" + std::to_string(i) + "] has an empty name");
    checkOtherBatches(layers[i], batch_size, origin);
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

LayerGraph LayerGraph::withOtherBatches(const std::vector<LayerGraph>& timed, const std::string& origin) const {
  std::vector<Layer> layers = layers_;
  for (const LayerGraph& other : timed) {
    const std::string which = origin + ": the profile at batch " + std::to_string(other.batchSize());
    if (other.size() != size()) throw Error(which + " has " + std::to_string(other.size()) + " layers, not " + std::to_string(size()));
    for (int i = 0; i < size(); ++i) {
      if (other.layer(i).name != layers[i].name)
        throw Error(which + ": layer " + std::to_string(i) + " is '" + other.layer(i).name + "', not '" + layers[i].name + "'");
      layers[i].other_batches.push_back({other.batchSize(), other.layer(i).passSeconds()});
    }
  }
  // The saved bytes on the line through (batch, saved) here and at the largest other
  // size, where it meets batch 0: what every micro-batch keeps whatever its size. Kept
  // within [0, saved]: allocator rounding can tilt the line a little either way.
  const auto largest = std::max_element(timed.begin(), timed.end(), [](const LayerGraph& a, const LayerGraph& b) {
    return a.batchSize() < b.batchSize();
  });
  // The optimizer step, and the copies of weight versions, as they run after the largest
  // size's passes (layer_graph.h).
  if (largest != timed.end() && largest->batchSize() > batch_size_)
    for (int i = 0; i < size(); ++i) {
      layers[i].optimizer_seconds = largest->layer(i).optimizer_seconds;
      layers[i].weight_versions = largest->layer(i).weight_versions;
    }
  if (largest != timed.end() && largest->batchSize() != batch_size_)
    for (int i = 0; i < size(); ++i) {
      const double b0 = static_cast<double>(batch_size_), b1 = static_cast<double>(largest->batchSize());
      const double s0 = static_cast<double>(layers[i].saved_activation_bytes);
      const double s1 = static_cast<double>(largest->layer(i).saved_activation_bytes);
      const double fixed = s0 - (s1 - s0) / (b1 - b0) * b0;
      layers[i].saved_fixed_bytes = static_cast<int64_t>(std::llround(std::clamp(fixed, 0.0, s0)));
    }
  return withLayers(std::move(layers), origin);  // which checks the batch sizes
}

LayerGraph LayerGraph::withLayers(std::vector<Layer> layers, const std::string& origin) const {
  LayerGraph g(std::move(layers), batch_size_, origin);
  g.overlap_factor_ = overlap_factor_;
  g.process_memory_ = process_memory_;
  g.action_overhead_ = action_overhead_;
  g.profiled_as_ = profiled_as_;
  g.backward_call_seconds_ = backward_call_seconds_;
  return g;
}

void LayerGraph::setProcessMemory(const ProcessMemory& memory) {
  if (memory.data_bytes < 0 || memory.framework_bytes < 0 || memory.runs < 0)
    throw Error("a process's memory beyond its tensors cannot be negative (data " + std::to_string(memory.data_bytes) +
                " bytes, framework " + std::to_string(memory.framework_bytes) + " bytes, " +
                std::to_string(memory.runs) + " runs)");
  process_memory_ = memory;
}

void LayerGraph::setActionOverhead(const LearnedActionOverhead& learned) {
  if (!(learned.seconds >= 0 && learned.seconds <= limits::kMaxSeconds) || learned.runs < 0)
    throw Error("the runtime's own time per action must lie between 0 and " + std::to_string(limits::kMaxSeconds) +
                " s, over 0 or more runs (" + std::to_string(learned.seconds) + " s, " +
                std::to_string(learned.runs) + " runs)");
  action_overhead_ = learned;
}

void LayerGraph::setBackwardCallSeconds(double seconds) {
  if (!(seconds >= 0 && seconds <= kMaxBackwardCallSeconds))
    throw Error("a backward pass's call into autograd must cost between 0 and " +
                std::to_string(kMaxBackwardCallSeconds) + " s beyond its work, not " + std::to_string(seconds) + " s");
  backward_call_seconds_ = seconds;
}

void LayerGraph::setOverlapFactor(double factor) {
  if (!(factor >= 0.5 && factor <= 1.0))
    throw Error("overlap_factor must lie between 0.5 (forward and backward fully overlapped) and 1 (no gain), got " +
                std::to_string(factor));
  overlap_factor_ = factor;
}

}  // namespace pipetrain::graph
