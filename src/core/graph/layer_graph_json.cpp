// LayerGraph <-> JSON ("pipetrain.layer_graph", version 1; docs/formats.md#layer-graph).
#include "pipetrain/graph/layer_graph.h"
#include "pipetrain/util/limits.h"

namespace pipetrain::graph {
namespace {

constexpr const char* kFormat = "pipetrain.layer_graph";
constexpr int kVersion = 1;

// `previous` is the layer listed just before this one (empty for the first), the
// default input so that chains need no "inputs" at all.
Layer readLayer(const json_io::JsonCursor& c, const std::string& previous) {
  c.allowOnly({"name", "kind", "inputs", "forward_seconds", "backward_seconds", "backward_input_seconds",
               "backward_weight_seconds", "output_bytes", "saved_activation_bytes", "param_bytes",
               "optimizer_state_bytes", "optimizer_seconds", "peak_memory_bytes", "split_peak_memory_bytes",
               "weight_peak_memory_bytes", "split_weight_seconds", "forward_no_grad_seconds", "split_activation_bytes",
               "saved_fixed_bytes", "other_batches", "weight_swap_seconds", "weight_stash_seconds",
               "weight_correction_seconds"});
  Layer l;
  l.name = c.field("name").asString();
  l.kind = c.stringOr("kind", "layer");
  if (c.has("inputs"))
    l.inputs = c.field("inputs").asStringArray();
  else if (!previous.empty())
    l.inputs = {previous};
  l.forward_seconds = c.field("forward_seconds").asSeconds();
  l.output_bytes = c.field("output_bytes").asBytes();
  l.param_bytes = c.field("param_bytes").asBytes();

  const bool split = c.has("backward_input_seconds") || c.has("backward_weight_seconds");
  if (c.has("backward_seconds")) {
    if (split)
      c.fail("give either \"backward_seconds\" or \"backward_input_seconds\" + \"backward_weight_seconds\", "
             "not both");
    // Split unknown: a layer with weights spends about as long on dL/dw as on dL/dx
    // (two matmuls of the same shape); a layer without weights has no W part.
    const double total = c.field("backward_seconds").asSeconds();
    l.backward_weight_seconds = l.param_bytes > 0 ? total / 2 : 0.0;
    l.backward_input_seconds = total - l.backward_weight_seconds;
  } else if (c.has("backward_input_seconds") && c.has("backward_weight_seconds")) {
    l.backward_input_seconds = c.field("backward_input_seconds").asSeconds();
    l.backward_weight_seconds = c.field("backward_weight_seconds").asSeconds();
  } else {
    c.fail("missing the backward cost: give \"backward_input_seconds\" and \"backward_weight_seconds\", "
           "or only \"backward_seconds\"");
  }

  l.saved_activation_bytes =
      c.has("saved_activation_bytes") ? c.field("saved_activation_bytes").asBytes() : l.output_bytes;
  // Adam keeps two moments per parameter.
  l.optimizer_state_bytes =
      c.has("optimizer_state_bytes") ? c.field("optimizer_state_bytes").asBytes() : 2 * l.param_bytes;
  l.optimizer_seconds = c.has("optimizer_seconds") ? c.field("optimizer_seconds").asSeconds() : 0.0;
  // Optional (files written before the profiler measured them have none).
  if (c.has("split_weight_seconds")) l.split_weight_seconds = c.field("split_weight_seconds").asSeconds();
  if (c.has("forward_no_grad_seconds")) l.forward_no_grad_seconds = c.field("forward_no_grad_seconds").asSeconds();
  if (c.has("peak_memory_bytes")) l.peak_memory_bytes = c.field("peak_memory_bytes").asBytes();
  if (c.has("split_peak_memory_bytes")) l.split_peak_memory_bytes = c.field("split_peak_memory_bytes").asBytes();
  if (c.has("weight_peak_memory_bytes")) l.weight_peak_memory_bytes = c.field("weight_peak_memory_bytes").asBytes();
  if (c.has("weight_swap_seconds")) l.weight_versions.swap = c.field("weight_swap_seconds").asSeconds();
  if (c.has("weight_stash_seconds")) l.weight_versions.stash = c.field("weight_stash_seconds").asSeconds();
  if (c.has("weight_correction_seconds"))
    l.weight_versions.correction = c.field("weight_correction_seconds").asSeconds();
  if (c.has("split_activation_bytes")) l.split_activation_bytes = c.field("split_activation_bytes").asBytes();
  if (c.has("saved_fixed_bytes")) {
    l.saved_fixed_bytes = c.field("saved_fixed_bytes").asBytes();
    if (l.saved_fixed_bytes > l.saved_activation_bytes)
      c.field("saved_fixed_bytes").fail("is more than the layer's saved_activation_bytes (" +
                                        std::to_string(l.saved_activation_bytes) + ")");
  }
  if (c.has("other_batches"))
    for (const auto& item : c.field("other_batches").asArray()) {
      item.allowOnly({"batch", "forward_seconds", "backward_input_seconds", "backward_weight_seconds",
                      "split_weight_seconds", "forward_no_grad_seconds"});
      TimedAtBatch t;
      t.batch = item.field("batch").asIntIn(1, limits::kMaxMicrobatchSize);
      t.seconds.forward = item.field("forward_seconds").asSeconds();
      t.seconds.backward_input = item.field("backward_input_seconds").asSeconds();
      t.seconds.backward_weight = item.field("backward_weight_seconds").asSeconds();
      t.seconds.split_weight = item.has("split_weight_seconds") ? item.field("split_weight_seconds").asSeconds()
                                                                : t.seconds.backward_weight;
      t.seconds.forward_no_grad = item.has("forward_no_grad_seconds") ? item.field("forward_no_grad_seconds").asSeconds()
                                                                      : t.seconds.forward;
      l.other_batches.push_back(t);
    }
  return l;
}

}  // namespace

LayerGraph LayerGraph::fromJson(const json_io::Json& j, const std::string& origin) {
  const json_io::JsonCursor root(j, origin);
  json_io::checkHeader(root, kFormat, kVersion);
  root.allowOnly({"format", "version", "batch_size", "overlap_factor", "process_memory", "action_overhead",
                  "profiled_as", "backward_call_seconds", "layers"});
  const int64_t batch_size = root.field("batch_size").asIntIn(1, limits::kMaxMicrobatchSize);
  const auto items = root.field("layers").asArray();
  if (items.size() > static_cast<std::size_t>(limits::kMaxLayers))
    root.field("layers").fail(std::to_string(items.size()) + " layers; pipetrain serves at most " +
                              std::to_string(limits::kMaxLayers));
  std::vector<Layer> layers;
  for (const auto& item : items)
    layers.push_back(readLayer(item, layers.empty() ? std::string() : layers.back().name));
  LayerGraph graph(std::move(layers), batch_size, origin);
  if (root.has("overlap_factor")) {
    try {
      graph.setOverlapFactor(root.field("overlap_factor").asNumber());
    } catch (const Error& e) {
      root.field("overlap_factor").fail(e.what());
    }
  }
  if (root.has("process_memory")) {
    const json_io::JsonCursor m = root.field("process_memory");
    m.allowOnly({"data_bytes", "framework_bytes", "runs", "heap"});
    ProcessMemory memory;
    if (m.has("data_bytes")) memory.data_bytes = m.field("data_bytes").asBytes();
    if (m.has("framework_bytes")) memory.framework_bytes = m.field("framework_bytes").asBytes();
    if (m.has("runs")) memory.runs = static_cast<int>(m.field("runs").asIntIn(0, 1 << 30));
    if (m.has("heap")) memory.heap = m.field("heap").asString();
    graph.setProcessMemory(memory);
  }
  if (root.has("action_overhead")) {
    const json_io::JsonCursor learned = root.field("action_overhead");
    learned.allowOnly({"seconds", "runs"});
    graph.setActionOverhead({learned.field("seconds").asSeconds(),
                             static_cast<int>(learned.field("runs").asIntIn(0, 1 << 30))});
  }
  if (root.has("backward_call_seconds")) {
    try {
      graph.setBackwardCallSeconds(root.field("backward_call_seconds").asSeconds());
    } catch (const Error& e) {
      root.field("backward_call_seconds").fail(e.what());
    }
  }
  if (root.has("profiled_as")) {
    const json_io::JsonCursor how = root.field("profiled_as");
    how.allowOnly({"threads", "shares", "probe_seconds", "thread_speedup"});
    graph.setProfiledAs({static_cast<int>(how.intOr("threads", 0)), static_cast<int>(how.intOr("shares", 0)),
                         how.has("probe_seconds") ? how.field("probe_seconds").asSeconds() : 0.0,
                         how.has("thread_speedup") ? how.field("thread_speedup").asNumberIn(limits::kMinRate,
                                                                                            limits::kMaxRate)
                                                   : 0.0});
    if (graph.profiledAs().threads < 0 || graph.profiledAs().shares < 0)
      how.fail("threads and shares are counts, >= 0");
  }
  return graph;
}

LayerGraph LayerGraph::load(const std::string& path) { return fromJson(json_io::readFile(path), path); }

json_io::Json LayerGraph::toJson() const {
  json_io::Json j = json_io::header(kFormat, kVersion);
  j["batch_size"] = batch_size_;
  if (overlap_factor_ != 1.0) j["overlap_factor"] = overlap_factor_;
  if (!process_memory_.empty()) {
    j["process_memory"] = {{"data_bytes", process_memory_.data_bytes},
                           {"framework_bytes", process_memory_.framework_bytes},
                           {"runs", process_memory_.runs}};
    if (!process_memory_.heap.empty()) j["process_memory"]["heap"] = process_memory_.heap;
  }
  if (action_overhead_.runs > 0)
    j["action_overhead"] = {{"seconds", action_overhead_.seconds}, {"runs", action_overhead_.runs}};
  if (profiled_as_.threads > 0 || profiled_as_.shares > 0 || profiled_as_.probe_seconds > 0) {
    j["profiled_as"] = {{"threads", profiled_as_.threads}, {"shares", profiled_as_.shares}};
    if (profiled_as_.probe_seconds > 0) j["profiled_as"]["probe_seconds"] = profiled_as_.probe_seconds;
    if (profiled_as_.thread_speedup > 0) j["profiled_as"]["thread_speedup"] = profiled_as_.thread_speedup;
  }
  if (backward_call_seconds_ > 0) j["backward_call_seconds"] = backward_call_seconds_;
  json_io::Json layers = json_io::Json::array();
  for (const Layer& l : layers_) {
    json_io::Json layer = {{"name", l.name},
                           {"kind", l.kind},
                           {"inputs", l.inputs},
                           {"forward_seconds", l.forward_seconds},
                           {"backward_input_seconds", l.backward_input_seconds},
                           {"backward_weight_seconds", l.backward_weight_seconds},
                           {"output_bytes", l.output_bytes},
                           {"saved_activation_bytes", l.saved_activation_bytes},
                           {"param_bytes", l.param_bytes},
                           {"optimizer_state_bytes", l.optimizer_state_bytes}};
    if (l.optimizer_seconds > 0) layer["optimizer_seconds"] = l.optimizer_seconds;
    if (l.weight_versions.swap > 0) layer["weight_swap_seconds"] = l.weight_versions.swap;
    if (l.weight_versions.stash > 0) layer["weight_stash_seconds"] = l.weight_versions.stash;
    if (l.weight_versions.correction > 0) layer["weight_correction_seconds"] = l.weight_versions.correction;
    if (l.split_weight_seconds >= 0) layer["split_weight_seconds"] = l.split_weight_seconds;
    if (l.forward_no_grad_seconds >= 0) layer["forward_no_grad_seconds"] = l.forward_no_grad_seconds;
    if (l.peak_memory_bytes >= 0) layer["peak_memory_bytes"] = l.peak_memory_bytes;
    if (l.split_peak_memory_bytes >= 0) layer["split_peak_memory_bytes"] = l.split_peak_memory_bytes;
    if (l.weight_peak_memory_bytes >= 0) layer["weight_peak_memory_bytes"] = l.weight_peak_memory_bytes;
    if (l.split_activation_bytes >= 0) layer["split_activation_bytes"] = l.split_activation_bytes;
    if (l.saved_fixed_bytes > 0) layer["saved_fixed_bytes"] = l.saved_fixed_bytes;
    if (!l.other_batches.empty()) {
      json_io::Json others = json_io::Json::array();
      for (const TimedAtBatch& t : l.other_batches)
        others.push_back({{"batch", t.batch},
                          {"forward_seconds", t.seconds.forward},
                          {"backward_input_seconds", t.seconds.backward_input},
                          {"backward_weight_seconds", t.seconds.backward_weight},
                          {"split_weight_seconds", t.seconds.split_weight},
                          {"forward_no_grad_seconds", t.seconds.forward_no_grad}});
      layer["other_batches"] = std::move(others);
    }
    layers.push_back(std::move(layer));
  }
  j["layers"] = std::move(layers);
  return j;
}

}  // namespace pipetrain::graph
