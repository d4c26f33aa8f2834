// Plan <-> JSON ("pipetrain.plan", version 1; docs/formats.md#plan) and the stage DAG.
#include "pipetrain/plan/plan.h"
#include "pipetrain/util/limits.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

namespace pipetrain::plan {
namespace {

constexpr const char* kFormat = "pipetrain.plan";
constexpr int kVersion = 1;

// Checked here for type and range only; validate() reports values below 1.
int readInt(const json_io::JsonCursor& c) {
  const int64_t v = c.asInt();
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) c.fail("out of range");
  return static_cast<int>(v);
}

// "schedule": "1f1b" is short for {"name": "1f1b"}.
ScheduleOptions readSchedule(const json_io::JsonCursor& c) {
  ScheduleOptions s;
  if (c.node().is_string()) {
    s.name = c.asString();
    return s;
  }
  c.allowOnly({"name", "chunks", "vertical_sync", "pipemare_lr_warmup", "pipemare_warmup_steps",
               "pipemare_correction", "pipemare_decay"});
  s.name = c.field("name").asString();
  if (c.has("chunks")) s.chunks = static_cast<int>(c.field("chunks").asIntIn(1, limits::kMaxStages));
  s.vertical_sync = c.boolOr("vertical_sync", s.vertical_sync);
  s.pipemare_lr_warmup = c.boolOr("pipemare_lr_warmup", s.pipemare_lr_warmup);
  if (c.has("pipemare_warmup_steps")) s.pipemare_warmup_steps = readInt(c.field("pipemare_warmup_steps"));
  s.pipemare_correction = c.boolOr("pipemare_correction", s.pipemare_correction);
  if (c.has("pipemare_decay")) s.pipemare_decay = c.field("pipemare_decay").asNumber();
  return s;
}

Stage readStage(const json_io::JsonCursor& c) {
  c.allowOnly({"layers", "devices", "recompute", "recompute_layers"});
  Stage s{c.field("layers").asStringArray(), c.field("devices").asStringArray(), c.boolOr("recompute", false)};
  if (c.has("recompute_layers")) {
    if (!s.recompute) c.field("recompute_layers").fail("needs \"recompute\": true beside it");
    s.recompute_layers = static_cast<int>(
        c.field("recompute_layers").asIntIn(1, std::max<int64_t>(1, static_cast<int64_t>(s.layers.size()))));
    if (s.recompute_layers == static_cast<int>(s.layers.size())) s.recompute_layers = 0;  // all of them
  }
  return s;
}

}  // namespace

Plan Plan::fromJson(const json_io::Json& j, const std::string& origin) {
  const json_io::JsonCursor root(j, origin);
  json_io::checkHeader(root, kFormat, kVersion);
  root.allowOnly({"format", "version", "microbatch_size", "microbatches", "schedule", "stages"});
  Plan p;
  p.microbatch_size = root.field("microbatch_size").asIntIn(1, limits::kMaxMicrobatchSize);
  p.microbatches = static_cast<int>(root.field("microbatches").asIntIn(1, limits::kMaxMicrobatches));
  p.schedule = readSchedule(root.field("schedule"));
  const auto stages = root.field("stages").asArray();
  if (stages.size() > static_cast<std::size_t>(limits::kMaxStages))
    root.field("stages").fail(std::to_string(stages.size()) + " stages; pipetrain serves at most " +
                              std::to_string(limits::kMaxStages));
  for (const auto& item : stages) p.stages.push_back(readStage(item));
  return p;
}

Plan Plan::load(const std::string& path) { return fromJson(json_io::readFile(path), path); }

std::string stageShape(const Plan& plan) {
  std::string out;
  for (int s = 0; s < plan.numStages();) {
    const std::size_t replicas = plan.stages[s].devices.size();
    int run = 1;
    while (s + run < plan.numStages() && plan.stages[s + run].devices.size() == replicas) ++run;
    if (!out.empty()) out += "+";
    out += std::to_string(run) + "x" + std::to_string(replicas);
    s += run;
  }
  return out;
}

std::vector<char> recomputedLayerMask(const Stage& stage, const graph::LayerGraph& graph) {
  std::vector<char> mask(graph.size(), 0);
  std::vector<int> order;  // the model's (topological) order
  for (const std::string& name : stage.layers) order.push_back(graph.indexOf(name));
  std::sort(order.begin(), order.end());
  for (int i = 0; i < stage.recomputedLayers(); ++i) mask[order[i]] = 1;
  return mask;
}

std::string recomputedStages(const Plan& plan) {
  std::string listed;
  int count = 0;
  const auto whole = [&](int s) { return plan.stages[s].recompute && plan.stages[s].recompute_layers == 0; };
  for (int s = 0; s < plan.numStages();) {
    if (plan.stages[s].recompute && !whole(s)) {  // some of its layers
      listed += (listed.empty() ? "" : ",") + std::to_string(s) + "(" +
                std::to_string(plan.stages[s].recompute_layers) + "/" + std::to_string(plan.stages[s].layers.size()) + ")";
      ++s;
      continue;
    }
    if (!whole(s)) {
      ++s;
      continue;
    }
    int end = s;  // a run of stages recomputing every layer [s, end]
    while (end + 1 < plan.numStages() && whole(end + 1)) ++end;
    listed += (listed.empty() ? "" : ",") + std::to_string(s) + (end > s ? "-" + std::to_string(end) : "");
    count += end - s + 1;
    s = end + 1;
  }
  return count == plan.numStages() ? "all" : listed;
}

json_io::Json Plan::toJson() const {
  json_io::Json j = json_io::header(kFormat, kVersion);
  j["microbatch_size"] = microbatch_size;
  j["microbatches"] = microbatches;
  j["schedule"] = {{"name", schedule.name},
                   {"chunks", schedule.chunks},
                   {"vertical_sync", schedule.vertical_sync},
                   {"pipemare_lr_warmup", schedule.pipemare_lr_warmup},
                   {"pipemare_warmup_steps", schedule.pipemare_warmup_steps},
                   {"pipemare_correction", schedule.pipemare_correction},
                   {"pipemare_decay", schedule.pipemare_decay}};
  json_io::Json stages_json = json_io::Json::array();
  for (const Stage& s : stages) {
    json_io::Json stage = {{"layers", s.layers}, {"devices", s.devices}};
    if (s.recompute) stage["recompute"] = true;  // absent = false: plans from before read the same
    if (s.recompute && s.recompute_layers > 0) stage["recompute_layers"] = s.recompute_layers;
    stages_json.push_back(std::move(stage));
  }
  j["stages"] = std::move(stages_json);
  return j;
}

StageGraph stageGraph(const Plan& plan, const graph::LayerGraph& graph) {
  const int p = plan.numStages();
  std::vector<int> stage_of(graph.size(), -1);
  for (int s = 0; s < p; ++s)
    for (const std::string& name : plan.stages[s].layers) {
      const int i = graph.indexOf(name);
      if (i >= 0 && stage_of[i] < 0) stage_of[i] = s;
    }

  // A producer's output crosses to a consumer stage once, however many layers of
  // that stage read it.
  std::map<std::pair<int, int>, int64_t> bytes;
  for (int i = 0; i < graph.size(); ++i) {
    const int s = stage_of[i];
    if (s < 0) continue;
    std::set<int> consumers;
    for (int c : graph.successors(i))
      if (stage_of[c] >= 0 && stage_of[c] != s) consumers.insert(stage_of[c]);
    for (int t : consumers) bytes[{s, t}] += graph.layer(i).output_bytes;
  }

  StageGraph g;
  g.preds.resize(p);
  g.succs.resize(p);
  g.edge_bytes.resize(p);
  for (const auto& [edge, b] : bytes) {  // ordered by (s, t): lists come out sorted
    g.succs[edge.first].push_back(edge.second);
    g.edge_bytes[edge.first].push_back(b);
    g.preds[edge.second].push_back(edge.first);
  }
  return g;
}

}  // namespace pipetrain::plan
