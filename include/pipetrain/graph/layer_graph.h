// LayerGraph: a model as a DAG of layers with profiled costs.
//
// A chain is the special case where every layer consumes only its predecessor.
// Costs are for one batch of `batch_size` samples (the batch the profiler ran). A
// layer's compute times may also be given at other batch sizes (Layer::other_batches);
// secondsAt() gives them at any micro-batch size, and every cost model and planner
// takes a layer's times from it. Bytes scale linearly with the micro-batch.
// JSON form: docs/formats.md#layer-graph ("pipetrain.layer_graph", version 1).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "pipetrain/util/json_io.h"

namespace pipetrain::graph {

// A layer's compute times for one pass over a batch.
struct PassSeconds {
  double forward = 0;
  double backward_input = 0;
  double backward_weight = 0;
  double split_weight = 0;  // Layer::splitWeightSeconds()
  // The forward pass without a graph (Layer::forwardNoGradSeconds()): what a recomputing
  // stage's F costs; its backward pass then runs `forward` again.
  double forward_no_grad = 0;

  // A micro-batch's forward and whole backward pass: F + I + W.
  double forwardBackward() const { return forward + backward_input + backward_weight; }
};

// A layer's compute times measured at another batch size than the graph's.
struct TimedAtBatch {
  int64_t batch = 0;
  PassSeconds seconds;
};

// What the runtime does to a layer's weights beyond computing with them, where a schedule
// keeps several versions: seconds at the profile's speed, measured by the profiler on the
// executor's own functions (torch/runtime/stage_state.h) and priced per action by
// sim::CostModel::versionSeconds. 0: not measured (or no weights), and not priced.
struct WeightVersionSeconds {
  double swap = 0;        // one exchange with a stashed version's: twice around an action that reads one
  double stash = 0;       // a copy kept aside, at a STEP whose old version a later action reads
  double correction = 0;  // PipeMare's T2: w - tau x velocity, before a backward pass runs on it
};

struct Layer {
  std::string name;
  std::string kind;                  // "linear", "conv", "attention", ... (informational)
  std::vector<std::string> inputs;   // producer layers; empty = reads the model input
  double forward_seconds = 0;
  double backward_input_seconds = 0;   // dL/dx part of the backward pass ("I")
  double backward_weight_seconds = 0;  // dL/dw part of the backward pass ("W")
  // A split schedule's W run on its own, after I, as the executor runs it (from the
  // gradients I kept at each parameter's operation). -1 = not measured:
  // splitWeightSeconds() then gives backward_weight_seconds.
  double split_weight_seconds = -1;
  // The forward pass under no_grad, as a recomputing stage's F runs it (no graph is
  // recorded; its backward pass runs the forward again with one). -1 = not measured:
  // forwardNoGradSeconds() then gives forward_seconds.
  double forward_no_grad_seconds = -1;
  int64_t output_bytes = 0;            // what crosses to consumers
  int64_t saved_activation_bytes = 0;  // kept from forward until backward finishes
  // The part of saved_activation_bytes that does not grow with the micro-batch: under
  // bf16, autocast's copies of the weights, which the backward pass keeps (measured on a
  // 1.21B gpt: docs/gpu.md, "Memory"). Taken by withOtherBatches() from the
  // bytes at two batch sizes; 0 = all of them grow in proportion. savedBytesAt() prices it.
  int64_t saved_fixed_bytes = 0;
  // What a split schedule holds between I and W instead: the activations W reads and the
  // gradients I kept for it. -1 = not measured: splitActivationBytes() then gives
  // saved_activation_bytes.
  int64_t split_activation_bytes = -1;
  int64_t param_bytes = 0;
  int64_t optimizer_state_bytes = 0;   // e.g. Adam's two moments = 2 x param_bytes
  double optimizer_seconds = 0;        // one optimizer step over the layer's weights
  WeightVersionSeconds weight_versions;
  // Measured by the profiler: the most memory the layer's forward and backward pass held
  // at once beyond what existed before it ran (docs/profiling.md), and the same for its
  // forward pass and a split schedule's I. -1 = not measured, and then absent from the
  // JSON form. The backward passes' transient tensors (the gradients flowing through, and
  // under I the graph that W still needs) are priced from them.
  int64_t peak_memory_bytes = -1;
  int64_t split_peak_memory_bytes = -1;
  // The most a split schedule's W held at once above what its I left: the weight
  // gradients it makes and the kernels' passing tensors (a convolution's weight gradient
  // reorders its whole input, many times its weights: docs/profiling.md, "A backward
  // pass's passing tensors"). -1 = not measured.
  int64_t weight_peak_memory_bytes = -1;
  // The same layer timed at other batch sizes (`pipetrain profile --batch 32,128`): a
  // layer is no cheaper per sample at 32 than at 128 only if nothing in it is fixed per
  // pass, and a matrix product of the 8 x 1024 mlp took well under as long per sample at
  // 128 as at 32 (docs/profiling.md, "Layers: `pipetrain profile`"). Empty: times scale
  // linearly from the graph's batch.
  std::vector<TimedAtBatch> other_batches;

  // Every time it has multiplied by `factor`: its passes' and its optimizer step's, at
  // every batch size.
  void scaleTimes(double factor);
  PassSeconds passSeconds() const {
    return {forward_seconds, backward_input_seconds, backward_weight_seconds, splitWeightSeconds(), forwardNoGradSeconds()};
  }
  double forwardNoGradSeconds() const { return forward_no_grad_seconds >= 0 ? forward_no_grad_seconds : forward_seconds; }
  double backwardSeconds() const { return backward_input_seconds + backward_weight_seconds; }
  double splitWeightSeconds() const { return split_weight_seconds >= 0 ? split_weight_seconds : backward_weight_seconds; }
  // What one micro-batch of `scale` times the graph's batch keeps from its forward pass
  // until its backward pass: the fixed part once, the rest in proportion.
  double savedBytesAt(double scale) const {
    return static_cast<double>(saved_fixed_bytes) + static_cast<double>(saved_activation_bytes - saved_fixed_bytes) * scale;
  }
  int64_t splitActivationBytes() const {
    return split_activation_bytes >= 0 ? split_activation_bytes : saved_activation_bytes;
  }
  // What its backward pass (B), or its split I, holds at its most beyond the layer's
  // saved activations, at `scale` times the profiled batch; 0 where not measured. B's
  // figure holds the weight gradients it makes, their size whatever the micro-batch
  // (most of fmnist-cnn's fc1's at 8 samples); the rest, tensors of one micro-batch,
  // grow with it. Scaling the gradients too priced its B at 64 samples at several times
  // what it held (docs/predictions.md, "The runs people start").
  double backwardTransientAt(double scale) const {
    return peak_memory_bytes < 0 ? 0.0 : grownFrom(static_cast<double>(peak_memory_bytes - saved_activation_bytes),
                                                   static_cast<double>(param_bytes), scale);
  }
  double inputBackwardTransientAt(double scale) const {
    return split_peak_memory_bytes < 0
               ? 0.0
               : grownFrom(static_cast<double>(split_peak_memory_bytes - saved_activation_bytes), 0.0, scale);
  }
  // What a split I keeps to the end of its engine call beyond the layer's saved
  // activations, at `scale`: the gradients W starts from and its output's gradient, less
  // what only I read (runtime::SplitBackward).
  double inputPassKeptBytesAt(double scale) const {
    return static_cast<double>(splitActivationBytes() + output_bytes) * scale - savedBytesAt(scale);
  }
  // What its W holds at its most above what I left, at `scale`: the weight gradients
  // (their size whatever the micro-batch) and passing tensors of the micro-batch. Where
  // not measured, the gradients alone.
  double weightPassPeakAt(double scale) const {
    const double gradients = static_cast<double>(param_bytes);
    return weight_peak_memory_bytes < 0 ? gradients
                                        : grownFrom(static_cast<double>(weight_peak_memory_bytes), gradients, scale);
  }
  // `bytes` measured at the profiled batch, of which up to `fixed` do not grow with the
  // micro-batch, at `scale` times that batch.
  static double grownFrom(double bytes, double fixed, double scale) {
    bytes = std::max(0.0, bytes);
    const double unchanged = std::min(bytes, fixed);
    return unchanged + (bytes - unchanged) * scale;
  }
};

// What a training process holds beyond the tensors the memory accounting prices (the
// weights, gradients, optimizer state and activations of its stages): where a profile
// measured it, docs/profiling.md#memory-the-process-holds.
struct ProcessMemory {
  // A rank that loads the model input or the labels holds the dataset in host memory:
  // the resident bytes opening it added, in the profile's process or a run's.
  int64_t data_bytes = 0;
  // Every rank: the rest of what training adds to the process (LibTorch's code as its
  // kernels page it in, the allocator's freed but kept memory, LibTorch's and the BLAS's
  // workspaces, the model as built whole, the transport's buffers), learned from runs of
  // this profile (`runs` of them, their mean). Before any run, the code the profile's own
  // passes paged in: the one part a profiling process holds as a rank does.
  int64_t framework_bytes = 0;
  int runs = 0;
  // The allocator the profiling processes ran on (util::heapName, as the ranks that use
  // the profile do: it is in the profile cache's key); "" where not recorded, glibc's
  // before 2026-12-01. What it keeps freed beside the tensors is its own (heap_share.h).
  std::string heap{};
  bool empty() const { return data_bytes == 0 && framework_bytes == 0 && runs == 0 && heap.empty(); }
};

// The runtime's own time around each action of a rank (cluster::Device::action_overhead)
// as runs of this profile measured it, less their sends' priced host cost
// (job::runtimeSecondsPerAction): their mean, `runs` of them; 0 runs: none learned, and
// the local cluster's constants price it. On this machine it ran 5-66 us an action from
// one model to the next (docs/predictions.md, "The runtime's own time, learned").
struct LearnedActionOverhead {
  double seconds = 0;
  int runs = 0;
};

// How a profile was taken, where it says: the threads its process computed on, and into
// how many shares of the layers the profiling processes split the model (1: one process
// timed the whole model). 0 = not recorded.
struct ProfiledAs {
  int threads = 0;
  int shares = 0;
  // How fast its core computed while it timed: the median seconds of a fixed computation
  // run after each timed pass (torch/runtime/core_probe.h, NOTE(core-probe)). Shares
  // timed on different cores are brought to the slower core's speed by it
  // (plan::mergeProfileShares), and a merged profile keeps that core's. 0 = not measured
  // (a GPU's profile).
  double probe_seconds = 0;
  // How many times faster a training step ran on `threads` than on one thread, where one
  // process timed the whole model on several (`pipetrain profile` without --share): a
  // cluster device that computes on fewer threads is priced from it
  // (planner::fitProfileToCluster). 0 = not measured.
  double thread_speedup = 0;
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
  // The smallest batch any layer was timed at: below it, secondsAt() can only guess.
  int64_t smallestTimedBatch() const;
  const Layer& layer(int index) const { return layers_[index]; }
  const std::vector<Layer>& layers() const { return layers_; }  // topological order
  // Layer `index`'s compute times for a micro-batch of `batch` samples. Between two
  // batch sizes it was timed at, interpolated linearly (a cost fixed per pass and one
  // per sample). Below the smallest, in proportion to it: optimistic (what is fixed per
  // pass shrinks with it). Above the largest, the line through the two largest carried
  // on, kept between the largest's times and those in proportion to it. Timed at one
  // size only, plain proportion.
  PassSeconds secondsAt(int index, int64_t batch) const;

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

  const ProfiledAs& profiledAs() const { return profiled_as_; }
  void setProfiledAs(const ProfiledAs& how) { profiled_as_ = how; }
  const ProcessMemory& processMemory() const { return process_memory_; }
  // Throws Error for a negative figure.
  void setProcessMemory(const ProcessMemory& memory);
  const LearnedActionOverhead& actionOverhead() const { return action_overhead_; }
  // Throws Error for a negative or absurd figure.
  void setActionOverhead(const LearnedActionOverhead& learned);
  // What one call into autograd's engine costs beyond the work it runs, on the profile's
  // CPU (0: not measured, as on a GPU, where that host time overlaps the kernels queued
  // before it). The profile timed each layer's B, I and W as a call of its own, and a
  // stage runs all its layers' in one call per action: the layers' figures are net of
  // it, and the cost model adds it once per B, I and W (NOTE(backward-call) in
  // profile_model.cpp).
  double backwardCallSeconds() const { return backward_call_seconds_; }
  // Throws Error for a negative or absurd figure.
  void setBackwardCallSeconds(double seconds);

  // `layers` (of the same model, at this graph's batch size) with this graph's figures of
  // the whole: the overlap factor, the process's memory, the runtime's learned time per
  // action, how it was profiled and its backward call. Throws as the constructor does.
  LayerGraph withLayers(std::vector<Layer> layers, const std::string& origin) const;

  // This graph with each layer's compute times in `timed` (profiles of the same model at
  // other batch sizes) added as its other_batches, and, where the largest size in `timed`
  // is larger than this graph's, each layer's saved_fixed_bytes from its saved
  // activations here and there, and its optimizer step as timed there. A step costs the
  // same arithmetic whatever the micro-batch, but it finds its weights, gradients and
  // state in a cache the passes before it left: after passes at 4 samples, a share of
  // the 2-stage gpt stepped faster than after passes at 16 or 32, or in a run at 16
  // (docs/predictions.md, "The runs people start"); the step a training run takes follows
  // a whole mini-batch's passes. Throws Error naming `origin` where a profile is of
  // another model or of a batch size given twice.
  LayerGraph withOtherBatches(const std::vector<LayerGraph>& timed, const std::string& origin) const;

 private:
  std::vector<Layer> layers_;
  int64_t batch_size_ = 1;
  double overlap_factor_ = 1.0;
  ProcessMemory process_memory_;
  LearnedActionOverhead action_overhead_;
  ProfiledAs profiled_as_;
  double backward_call_seconds_ = 0;
  std::unordered_map<std::string, int> index_;
  std::vector<std::vector<int>> preds_;
  std::vector<std::vector<int>> succs_;
};

}  // namespace pipetrain::graph
