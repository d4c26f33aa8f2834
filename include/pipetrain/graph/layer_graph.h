// LayerGraph: a model as a DAG of layers with profiled costs.
//
// A chain is the special case where every layer consumes only its predecessor.
// Costs are for one batch of `batch_size` samples (the batch the profiler ran);
// the cost model scales them linearly to a plan's micro-batch size.
// JSON form: docs/formats.md#layer-graph ("pipetrain.layer_graph", version 1).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "pipetrain/util/json_io.h"

namespace pipetrain::graph {

struct Layer {
  std::string name;
  std::string kind;                  // "linear", "conv", "attention", ... (informational)
  std::vector<std::string> inputs;   // producer layers; empty = reads the model input
  double forward_seconds = 0;
  double backward_input_seconds = 0;   // dL/dx part of the backward pass ("I")
  double backward_weight_seconds = 0;  // dL/dw part of the backward pass ("W")
  // A split schedule's W run on its own, after I, as the executor runs it: the layer's
  // parameters-only backward from its output gradient, which re-runs the layer's own
  // operations (costlier than backward_weight_seconds in multi-op layers such as
  // transformer blocks). -1 = not measured: splitWeightSeconds() then gives
  // backward_weight_seconds.
  double split_weight_seconds = -1;
  int64_t output_bytes = 0;            // what crosses to consumers
  int64_t saved_activation_bytes = 0;  // kept from forward until backward finishes
  int64_t param_bytes = 0;
  int64_t optimizer_state_bytes = 0;   // e.g. Adam's two moments = 2 x param_bytes
  double optimizer_seconds = 0;        // one optimizer step over the layer's weights
  // Measured by the profiler: the most memory the layer's forward and backward pass held
  // at once beyond what existed before it ran (docs/profiling.md). Informational; -1 =
  // not measured, and then absent from the JSON form.
  int64_t peak_memory_bytes = -1;

  double backwardSeconds() const { return backward_input_seconds + backward_weight_seconds; }
  double splitWeightSeconds() const { return split_weight_seconds >= 0 ? split_weight_seconds : backward_weight_seconds; }
};

class LayerGraph {
 public:
  LayerGraph() = default;
  // Validates names (unique, non-empty), inputs (known, no cycles) and sorts the
  // layers topologically, keeping the given order where it already is one.
  // Throws Error naming `origin` and the offending layer.
  LayerGraph(std::vector<Layer> layers, int64_t batch_size, std::string origin = "layer graph");

  static LayerGraph fromJson(const json_io::Json& j, const std::string& origin);
  static LayerGraph load(const std::string& path);
  json_io::Json toJson() const;

  // A chain of `n` identical layers named "layer0".."layer{n-1}".
  static LayerGraph uniformChain(int n, double forward_seconds, double backward_input_seconds,
                                 double backward_weight_seconds, int64_t output_bytes = 0,
                                 int64_t param_bytes = 0);

  int size() const { return static_cast<int>(layers_.size()); }
  int64_t batchSize() const { return batch_size_; }
  const Layer& layer(int index) const { return layers_[index]; }
  const std::vector<Layer>& layers() const { return layers_; }  // topological order

  // -1 when there is no such layer.
  int indexOf(const std::string& name) const;
  const std::vector<int>& predecessors(int index) const { return preds_[index]; }
  const std::vector<int>& successors(int index) const { return succs_[index]; }
  bool isChain() const;

  // How long an overlapped forward+backward pair (DualPipe's F&B, two micro-batches
  // computed together) takes, as a share of the two run one after the other: 1 when the
  // device gains nothing (the default; a profile may measure less), 0.5 at best.
  double overlapFactor() const { return overlap_factor_; }
  // Throws Error outside [0.5, 1].
  void setOverlapFactor(double factor);

 private:
  std::vector<Layer> layers_;
  int64_t batch_size_ = 1;
  double overlap_factor_ = 1.0;
  std::unordered_map<std::string, int> index_;
  std::vector<std::vector<int>> preds_;
  std::vector<std::vector<int>> succs_;
};

}  // namespace pipetrain::graph
