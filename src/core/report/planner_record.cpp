#include "pipetrain/report/planner_record.h"

#include "pipetrain/report/pages.h"

namespace pipetrain::report {
namespace {

using json_io::Json;
using json_io::JsonCursor;

std::vector<double> numbers(const JsonCursor& c, const std::string& key) {
  std::vector<double> out;
  if (c.has(key))
    for (const JsonCursor& v : c.field(key).asArray()) out.push_back(v.asNumber());
  return out;
}

std::vector<int64_t> integers(const JsonCursor& c, const std::string& key) {
  std::vector<int64_t> out;
  if (c.has(key))
    for (const JsonCursor& v : c.field(key).asArray()) out.push_back(static_cast<int64_t>(v.asNumber()));
  return out;
}

Json calibrationToJson(const CalibrationRecord& c) {
  Json j = c.figures.toJson();
  j["path"] = c.path;
  j["seconds"] = c.seconds;
  return j;
}

CalibrationRecord calibrationFromJson(const JsonCursor& c) {
  return {c.stringOr("path", ""), c.numberOr("seconds", 0), planner::CalibrationFigures::fromJson(c)};
}

Json chosenToJson(const ChosenPrediction& c) {
  return {{"throughput", c.throughput},
          {"iteration_seconds", c.iteration_seconds},
          {"rank_busy_seconds", c.rank_busy_seconds},
          {"rank_core_seconds", c.rank_core_seconds},
          {"rank_peak_memory_bytes", c.rank_peak_memory_bytes},
          {"rank_process_bytes", c.rank_process_bytes},
          {"process_memory_runs", c.process_memory_runs},
          {"probe_seconds", c.probe_seconds}};
}

ChosenPrediction chosenFromJson(const JsonCursor& c) {
  ChosenPrediction p;
  p.throughput = c.numberOr("throughput", 0);
  p.iteration_seconds = c.numberOr("iteration_seconds", 0);
  p.rank_busy_seconds = numbers(c, "rank_busy_seconds");
  p.rank_core_seconds = numbers(c, "rank_core_seconds");
  p.rank_peak_memory_bytes = integers(c, "rank_peak_memory_bytes");
  p.rank_process_bytes = integers(c, "rank_process_bytes");
  p.process_memory_runs = static_cast<int>(c.intOr("process_memory_runs", 0));
  p.probe_seconds = c.numberOr("probe_seconds", 0);
  return p;
}

ProfileSource profileSourceFromJson(const JsonCursor& c) {
  ProfileSource p;
  p.path = c.stringOr("path", "");
  p.cached = c.boolOr("cached", false);
  p.measured_seconds = c.numberOr("measured_seconds", 0);
  p.measured = c.stringOr("measured", "");
  p.runs_merged = static_cast<int>(c.intOr("runs_merged", 0));
  p.seconds = c.numberOr("seconds", 0);
  return p;
}

}  // namespace

Json profileSourceToJson(const ProfileSource& p) {
  Json j{{"path", p.path}, {"cached", p.cached}, {"measured_seconds", p.measured_seconds},
         {"runs_merged", p.runs_merged}, {"seconds", p.seconds}};
  if (!p.measured.empty()) j["measured"] = p.measured;
  return j;
}

Json plannerRecordToJson(const PlannerRecord& r) {
  Json j = tableToJson(r.candidates);
  j["notes"] = r.notes;
  j["profile"] = profileSourceToJson(r.profile);
  j["planning_seconds"] = r.planning_seconds;
  j["objective"] = r.objective;
  if (r.calibration) j["calibration"] = calibrationToJson(*r.calibration);
  j["chosen"] = chosenToJson(r.chosen);
  j["links"] = sim::trafficToJson(r.links);
  return j;
}

PlannerRecord plannerRecordFromJson(const JsonCursor& j) {
  PlannerRecord r;
  r.candidates = tableFromJson(j.node(), j.where());
  if (j.has("notes")) r.notes = j.field("notes").asStringArray();
  if (j.has("profile")) r.profile = profileSourceFromJson(j.field("profile"));
  r.planning_seconds = j.numberOr("planning_seconds", 0);
  r.objective = j.stringOr("objective", "");
  if (j.has("calibration")) r.calibration = calibrationFromJson(j.field("calibration"));
  if (j.has("chosen")) r.chosen = chosenFromJson(j.field("chosen"));
  if (j.has("links"))
    for (const JsonCursor& t : j.field("links").asArray())
      r.links.push_back({t.field("link").asString(), t.field("what").asString(), t.field("bytes").asNumber(),
                         t.field("wire_seconds").asNumber()});
  return r;
}

}  // namespace pipetrain::report
