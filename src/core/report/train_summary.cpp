#include "pipetrain/report/train_summary.h"

#include "pipetrain/planner/explore.h"
#include "pipetrain/trace/timeline_json.h"

namespace pipetrain::report {
namespace {

using json_io::Json;
using json_io::JsonCursor;

constexpr const char* kFormat = "pipetrain.train-summary";

Json rankToJson(const RankSummary& r) {
  Json j{{"rank", r.rank},
         {"stages", r.stages},
         {"bubble_fraction", r.bubble_fraction},
         {"wait_fraction", r.wait_fraction},
         {"allreduce_fraction", r.allreduce_fraction},
         {"overhead_fraction", r.overhead_fraction},
         {"framework_seconds_per_action", r.framework_seconds_per_action},
         {"core_wait_fraction", r.core_wait_fraction},
         {"core_run_fraction", r.core_run_fraction},
         {"probe_seconds", r.probe_seconds},
         {"peak_memory_bytes", r.peak_memory_bytes},
         {"start_memory_bytes", r.start_memory_bytes},
         {"data_memory_bytes", r.data_memory_bytes},
         {"heap_free_bytes", r.heap_free_bytes},
         {"device", r.device},
         {"data_channel", r.data_channel},
         {"heap", r.heap},
         {"peak_device_memory_bytes", r.peak_device_memory_bytes},
         {"weight_versions", r.weight_versions},
         {"weight_bytes", r.weight_bytes},
         {"action_seconds", actionTimesToJson(r.action_seconds)},
         {"predicted_bubble_fraction", r.predicted_bubble_fraction},
         {"predicted_weight_versions", r.predicted_weight_versions}};
  if (r.predicted_peak_memory_bytes) j["predicted_peak_memory_bytes"] = *r.predicted_peak_memory_bytes;
  if (r.predicted_process_bytes) j["predicted_process_bytes"] = *r.predicted_process_bytes;
  return j;
}

std::optional<int64_t> optionalInt(const JsonCursor& c, const std::string& key) {
  if (!c.has(key)) return std::nullopt;
  return static_cast<int64_t>(c.field(key).asNumber());
}

RankSummary rankFromJson(const JsonCursor& c) {
  RankSummary r;
  r.rank = static_cast<int>(c.field("rank").asInt());
  if (c.has("stages"))
    for (const JsonCursor& s : c.field("stages").asArray()) r.stages.push_back(static_cast<int>(s.asInt()));
  r.bubble_fraction = c.field("bubble_fraction").asNumber();
  r.wait_fraction = c.numberOr("wait_fraction", 0);
  r.allreduce_fraction = c.numberOr("allreduce_fraction", 0);
  r.overhead_fraction = c.numberOr("overhead_fraction", 0);
  r.framework_seconds_per_action = c.numberOr("framework_seconds_per_action", 0);
  r.core_wait_fraction = c.numberOr("core_wait_fraction", -1);
  r.core_run_fraction = c.numberOr("core_run_fraction", -1);
  r.probe_seconds = c.numberOr("probe_seconds", 0);
  r.peak_memory_bytes = static_cast<int64_t>(c.field("peak_memory_bytes").asNumber());
  r.start_memory_bytes = static_cast<int64_t>(c.numberOr("start_memory_bytes", 0));
  r.data_memory_bytes = static_cast<int64_t>(c.numberOr("data_memory_bytes", -1));
  r.heap_free_bytes = static_cast<int64_t>(c.numberOr("heap_free_bytes", -1));
  r.device = c.stringOr("device", "cpu");
  r.data_channel = c.stringOr("data_channel", "");
  r.heap = c.stringOr("heap", "");
  r.peak_device_memory_bytes = static_cast<int64_t>(c.numberOr("peak_device_memory_bytes", -1));
  r.weight_versions = static_cast<int>(c.intOr("weight_versions", 0));
  r.weight_bytes = static_cast<int64_t>(c.numberOr("weight_bytes", 0));
  if (c.has("action_seconds"))
    for (const JsonCursor& a : c.field("action_seconds").asArray())
      r.action_seconds.push_back({static_cast<int>(a.field("stage").asInt()), a.field("type").asString(),
                                  a.field("seconds").asNumber(), a.numberOr("cpu_seconds", 0)});
  r.predicted_bubble_fraction = c.numberOr("predicted_bubble_fraction", 0);
  r.predicted_weight_versions = static_cast<int>(c.intOr("predicted_weight_versions", 0));
  r.predicted_peak_memory_bytes = optionalInt(c, "predicted_peak_memory_bytes");
  r.predicted_process_bytes = optionalInt(c, "predicted_process_bytes");
  return r;
}

Evaluation evaluationFromJson(const JsonCursor& c) {
  return {static_cast<int>(c.intOr("epoch", 0)), c.intOr("samples", 0), c.numberOr("train_seconds", 0),
          c.field("wall_seconds").asNumber(), c.numberOr("test_accuracy", -1), c.numberOr("test_loss", -1)};
}

Json eventToJson(const RunEvent& e) {
  return {{"seconds", e.seconds}, {"event", e.event}, {"ranks", e.ranks}, {"checkpoint", e.checkpoint},
          {"why", e.why}};
}

RunEvent eventFromJson(const JsonCursor& c) {
  return {c.field("seconds").asNumber(), c.field("event").asString(), static_cast<int>(c.intOr("ranks", 0)),
          c.stringOr("checkpoint", ""), c.stringOr("why", "")};
}

}  // namespace

Json evaluationToJson(const Evaluation& e) {
  return {{"epoch", e.epoch},
          {"samples", e.samples},
          {"train_seconds", e.train_seconds},
          {"wall_seconds", e.wall_seconds},
          {"test_accuracy", e.test_accuracy},
          {"test_loss", e.test_loss}};
}

Json actionTimesToJson(const std::vector<ActionTime>& times) {
  Json out = Json::array();
  for (const ActionTime& a : times)
    out.push_back({{"stage", a.stage}, {"type", a.type}, {"seconds", a.seconds}, {"cpu_seconds", a.cpu_seconds}});
  return out;
}

Json trainSummaryToJson(const TrainSummary& s) {
  Json ranks = Json::array(), history = Json::array();
  for (const RankSummary& r : s.ranks) ranks.push_back(rankToJson(r));
  for (const Evaluation& e : s.history) history.push_back(evaluationToJson(e));
  Json j{{"format", kFormat},
         {"version", 1},
         {"model", s.model},
         {"schedule", s.schedule},
         {"asynchronous", s.asynchronous},
         {"world_size", s.world_size},
         {"final_loss", s.final_loss},
         {"throughput", s.throughput},
         {"wall_seconds", s.wall_seconds},
         {"samples", s.samples},
         {"ranks", ranks},
         {"history", history},
         {"predicted_throughput", s.predicted_throughput},
         {"plan_file", s.plan_file},
         {"plan", s.plan.toJson()},
         {"plan_name", planner::planName(s.plan)},  // for readers without the rule (python/pipetrain)
         {"measured_timeline", trace::timelineToJson(s.measured_timeline)},
         {"predicted_timeline", trace::timelineToJson(s.predicted_timeline)},
         {"recipe", recipe::recipeToJson(s.recipe.optimizer, s.recipe.lr, s.recipe.lr_schedule,
                                         s.recipe.clip_grad_norm)}};
  if (s.planner) j["planner"] = plannerRecordToJson(*s.planner);
  if (!s.events.empty()) {
    j["events"] = Json::array();
    for (const RunEvent& e : s.events) j["events"].push_back(eventToJson(e));
  }
  if (!s.grad_norms.empty()) j["grad_norms"] = s.grad_norms;
  if (s.test_accuracy) j["test_accuracy"] = *s.test_accuracy;
  if (s.test_loss) j["test_loss"] = *s.test_loss;
  return j;
}

TrainSummary trainSummaryFromJson(const Json& json, const std::string& origin) {
  const JsonCursor c(json, origin);
  json_io::checkHeader(c, kFormat, 1);
  TrainSummary s;
  s.model = c.field("model").asString();
  s.schedule = c.field("schedule").asString();
  s.asynchronous = c.boolOr("asynchronous", false);
  s.world_size = static_cast<int>(c.field("world_size").asInt());
  s.final_loss = c.field("final_loss").asNumber();
  s.throughput = c.field("throughput").asNumber();
  s.wall_seconds = c.field("wall_seconds").asNumber();
  s.samples = c.field("samples").asInt();
  for (const JsonCursor& r : c.field("ranks").asArray()) s.ranks.push_back(rankFromJson(r));
  if (c.has("history"))
    for (const JsonCursor& e : c.field("history").asArray()) s.history.push_back(evaluationFromJson(e));
  s.predicted_throughput = c.field("predicted_throughput").asNumber();
  s.plan_file = c.stringOr("plan_file", "");
  s.plan = plan::Plan::fromJson(c.field("plan").node(), origin + ": plan");
  if (c.has("measured_timeline")) s.measured_timeline = trace::timelineFromJson(c.field("measured_timeline").node(), origin);
  if (c.has("predicted_timeline"))
    s.predicted_timeline = trace::timelineFromJson(c.field("predicted_timeline").node(), origin);
  if (c.has("planner")) s.planner = plannerRecordFromJson(c.field("planner"));
  if (c.has("events"))
    for (const JsonCursor& e : c.field("events").asArray()) s.events.push_back(eventFromJson(e));
  if (c.has("recipe")) s.recipe = recipe::recipeFromJson(c.field("recipe"));
  if (c.has("grad_norms"))
    for (const JsonCursor& g : c.field("grad_norms").asArray()) s.grad_norms.push_back(g.asNumber());
  if (c.has("test_accuracy")) s.test_accuracy = c.field("test_accuracy").asNumber();
  if (c.has("test_loss")) s.test_loss = c.field("test_loss").asNumber();
  return s;
}

}  // namespace pipetrain::report
