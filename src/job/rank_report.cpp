#include "pipetrain/job/rank_report.h"

#include <cmath>
#include <cstdio>

#include "pipetrain/schedule/action.h"
#include "pipetrain/trace/timeline_json.h"
#include "pipetrain/util/error.h"

namespace pipetrain::job {

using json_io::Json;
using json_io::JsonCursor;

namespace {

runtime::EvalPoint evalFromJson(const JsonCursor& c) {
  runtime::EvalPoint e;
  e.epoch = static_cast<int>(c.field("epoch").asInt());
  e.samples = c.field("samples").asInt();
  e.train_seconds = c.field("train_seconds").asNumber();
  e.wall_seconds = c.field("wall_seconds").asNumber();
  e.test_accuracy = c.field("test_accuracy").asNumber();
  e.test_loss = c.field("test_loss").asNumber();
  return e;
}

schedule::ActionType actionType(const JsonCursor& c) {
  const std::string name = c.asString();
  for (int t = 0; t < schedule::kNumActionTypes; ++t)
    if (name == schedule::name(static_cast<schedule::ActionType>(t))) return static_cast<schedule::ActionType>(t);
  c.fail("unknown action type '" + name + "'");
}

std::vector<int64_t> intArray(const JsonCursor& c) {
  std::vector<int64_t> out;
  for (const JsonCursor& v : c.asArray()) out.push_back(v.asInt());
  return out;
}

Json recentStepsToJson(const std::vector<std::vector<trace::TimedAction>>& steps) {
  Json out = Json::array();
  for (const auto& step : steps) out.push_back(trace::actionsToJson(step));
  return out;
}

}  // namespace

report::Evaluation evaluationOf(const runtime::EvalPoint& e) {
  return {e.epoch, e.samples, e.train_seconds, e.wall_seconds, e.test_accuracy, e.test_loss};
}

std::vector<report::ActionTime> actionTimesOf(const std::vector<runtime::RankResult::ActionSeconds>& all) {
  std::vector<report::ActionTime> out;
  for (const auto& a : all) out.push_back({a.stage, schedule::name(a.type), a.seconds, a.cpu_seconds});
  return out;
}

std::string progressReportLine(const ProgressReport& p) {
  char line[160];
  std::snprintf(line, sizeof line, "PROGRESS %d %lld %lld %.6f %.3f", p.epoch, static_cast<long long>(p.step),
                static_cast<long long>(p.steps), p.loss, p.samples_per_second);
  return line;
}

std::optional<ProgressReport> readProgressReport(const std::string& line) {
  ProgressReport p;
  long long step = 0, steps = 0;
  if (std::sscanf(line.c_str(), "PROGRESS %d %lld %lld %lf %lf", &p.epoch, &step, &steps, &p.loss,
                  &p.samples_per_second) != 5)
    return std::nullopt;
  p.step = step;
  p.steps = steps;
  return p;
}

Json rankResultToJson(const runtime::RankResult& r) {
  Json history = Json::array();
  for (const auto& e : r.history) history.push_back(report::evaluationToJson(evaluationOf(e)));
  return {{"rank", r.rank},
          {"stages", r.stages},
          {"last_stage", r.last_stage},
          {"final_loss", r.final_loss},
          {"grad_norms", r.grad_norms},
          {"test_accuracy", r.test_accuracy},
          {"test_loss", r.test_loss},
          {"history", history},
          {"samples", r.samples},
          {"train_seconds", r.train_seconds},
          {"busy_seconds", r.busy_seconds},
          {"allreduce_seconds", r.allreduce_seconds},
          {"wait_seconds", r.wait_seconds},
          {"actions_run", r.actions_run},
          {"core_wait_seconds", r.core_wait_seconds},
          {"core_run_seconds", r.core_run_seconds},
          {"probe_seconds", r.probe_seconds},
          {"peak_memory_bytes", r.peak_memory_bytes},
          {"device", r.device},
          {"data_channel", r.data_channel},
          {"heap", r.heap},
          {"peak_device_memory_bytes", r.peak_device_memory_bytes},
          {"start_memory_bytes", r.start_memory_bytes},
          {"data_memory_bytes", r.data_memory_bytes},
          {"heap_free_bytes", r.heap_free_bytes},
          {"sums_in_shared_memory", r.sums_in_shared_memory},
          {"weight_versions", r.weight_versions},
          {"weight_bytes", r.weight_bytes},
          {"max_sends_held", r.max_sends_held},
          {"recent_steps", recentStepsToJson(r.recent_steps)},
          {"action_seconds", report::actionTimesToJson(actionTimesOf(r.action_seconds))},
          {"minibatch_busy_seconds", r.minibatch_busy_seconds},
          {"minibatch_busy_cpu_seconds", r.minibatch_busy_cpu_seconds},
          {"stage_output_bytes", r.stage_output_bytes},
          {"stage_preds", r.stage_preds},
          {"stage_param_bytes", r.stage_param_bytes}};
}

runtime::RankResult rankResultFromJson(const Json& json, const std::string& origin) {
  const JsonCursor c(json, origin);
  runtime::RankResult r;
  r.rank = static_cast<int>(c.field("rank").asNonNegativeInt());
  for (const JsonCursor& s : c.field("stages").asArray()) r.stages.push_back(static_cast<int>(s.asNonNegativeInt()));
  r.last_stage = c.field("last_stage").asBool();
  r.final_loss = c.field("final_loss").asNumber();
  for (const JsonCursor& n : c.field("grad_norms").asArray())  // NaN, where a step had none, is written null
    r.grad_norms.push_back(n.node().is_null() ? std::nan("") : n.asNumber());
  r.test_accuracy = c.field("test_accuracy").asNumber();
  r.test_loss = c.field("test_loss").asNumber();
  for (const JsonCursor& e : c.field("history").asArray()) r.history.push_back(evalFromJson(e));
  r.samples = c.field("samples").asNonNegativeInt();
  r.train_seconds = c.field("train_seconds").asNumber();
  r.busy_seconds = c.field("busy_seconds").asNumber();
  r.allreduce_seconds = c.field("allreduce_seconds").asNumber();
  r.wait_seconds = c.field("wait_seconds").asNumber();
  r.actions_run = c.field("actions_run").asNonNegativeInt();
  r.core_wait_seconds = c.field("core_wait_seconds").asNumber();
  r.core_run_seconds = c.field("core_run_seconds").asNumber();
  r.probe_seconds = c.field("probe_seconds").asSeconds();
  r.peak_memory_bytes = c.field("peak_memory_bytes").asInt();
  r.device = c.field("device").asString();
  r.data_channel = c.field("data_channel").asString();
  r.heap = c.field("heap").asString();
  r.peak_device_memory_bytes = c.field("peak_device_memory_bytes").asInt();
  r.start_memory_bytes = c.field("start_memory_bytes").asInt();
  r.data_memory_bytes = c.field("data_memory_bytes").asInt();
  r.heap_free_bytes = c.field("heap_free_bytes").asInt();
  r.sums_in_shared_memory = c.field("sums_in_shared_memory").asBool();
  r.weight_versions = static_cast<int>(c.field("weight_versions").asInt());
  r.weight_bytes = c.field("weight_bytes").asInt();
  r.max_sends_held = static_cast<int>(c.field("max_sends_held").asInt());
  for (const JsonCursor& step : c.field("recent_steps").asArray())
    r.recent_steps.push_back(trace::actionsFromJson(step.node(), origin + ": recent_steps"));
  for (const JsonCursor& a : c.field("action_seconds").asArray())
    r.action_seconds.push_back({static_cast<int>(a.field("stage").asNonNegativeInt()), actionType(a.field("type")),
                                a.field("seconds").asNumber(), a.field("cpu_seconds").asNumber()});
  for (const JsonCursor& b : c.field("minibatch_busy_seconds").asArray())
    r.minibatch_busy_seconds.push_back(b.asNumber());
  for (const JsonCursor& b : c.field("minibatch_busy_cpu_seconds").asArray())
    r.minibatch_busy_cpu_seconds.push_back(b.asNumber());
  r.stage_output_bytes = intArray(c.field("stage_output_bytes"));
  for (const JsonCursor& preds : c.field("stage_preds").asArray()) {
    std::vector<int>& p = r.stage_preds.emplace_back();
    for (const JsonCursor& q : preds.asArray()) p.push_back(static_cast<int>(q.asNonNegativeInt()));
  }
  r.stage_param_bytes = intArray(c.field("stage_param_bytes"));
  return r;
}

}  // namespace pipetrain::job
