// pipetrain_native: the core library's requests as Python calls, for the Python API
// (python/pipetrain/_binary.py). Each call takes the request's options as the command
// line would give them, by name (the request's option table: util/option_table.h), and
// returns what the command prints as JSON or writes as a file. pipetrain::Error becomes
// pipetrain.PipetrainError with the same one-line message.
#include <string>
#include <utility>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "pipetrain/graph/profile_cache.h"
#include "pipetrain/planner/plan_job.h"
#include "pipetrain/schedule/schedule_request.h"
#include "pipetrain/sim/simulation_job.h"
#include "pipetrain/trace/svg_gantt.h"
#include "pipetrain/util/error.h"

namespace py = pybind11;

namespace pipetrain {
namespace {

// [(name, [value, ...]), ...]: the options in the order given.
using Values = std::vector<std::pair<std::string, std::vector<std::string>>>;

void applyAll(const std::vector<options::Option>& table, const Values& values, const std::string& command) {
  for (const auto& [name, given] : values) options::apply(table, name, given, command);
}

// The compute actions per rank as CSV, as `schedule --write-csv` writes them.
std::string scheduleCsv(const Values& values) {
  schedule::ScheduleRequest request;
  applyAll(schedule::scheduleOptions(request), values, "schedule");
  return schedule::toCsv(schedule::generatedProgram(request));
}

// `simulate --json`'s report, and the Gantt chart `--svg` writes.
std::pair<std::string, std::string> simulated(const Values& values) {
  sim::SimulationRequest request;
  applyAll(sim::simulationOptions(request), values, "simulate");
  const sim::SimulatedPlan s = sim::simulate(request);
  json_io::Json report = s.evaluation.report.toJson();
  if (!s.note.empty()) report["profile_note"] = s.note;
  return {report.dump(), trace::toSvgGantt(s.evaluation.timeline)};
}

// `plan --json`'s choice and ranked table, and the chosen plan as `--out` writes it.
std::pair<std::string, std::string> planned(const Values& values) {
  planner::PlanRequest request;
  applyAll(planner::planOptions(request), values, "plan");
  const planner::PlannedFromFiles p = planner::planFromFiles(request);
  json_io::Json j = p.exploration.toJson();
  if (!p.note.empty()) j["profile_note"] = p.note;
  return {j.dump(), p.exploration.best().plan.toJson().dump()};
}

}  // namespace
}  // namespace pipetrain

PYBIND11_MODULE(pipetrain_native, m) {
  m.doc() = "pipetrain's core library: schedules, simulations and plans, in this process";
  // pipetrain.PipetrainError, the Python API's one error class, imported when first raised
  // (the package imports this module, not the other way round).
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const pipetrain::Error& e) {
      py::object error = py::module_::import("pipetrain._binary").attr("PipetrainError");
      PyErr_SetString(error.ptr(), e.what());
    }
  });
  // Planning takes up to a second: other Python threads run meanwhile.
  const auto released = py::call_guard<py::gil_scoped_release>();
  m.def("schedule_csv", &pipetrain::scheduleCsv, py::arg("options"), released);
  m.def("simulate", &pipetrain::simulated, py::arg("options"), released);
  m.def("plan", &pipetrain::planned, py::arg("options"), released);
  m.def("cache_dir", &pipetrain::graph::ProfileCache::defaultDir, "where profiles and captures are cached");
}
