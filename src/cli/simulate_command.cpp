// `pipetrain simulate`: predict a schedule's timeline and metrics, from a plan or from
// the synthetic --uniform shortcut; optionally draw it.
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "options.h"
#include "pipetrain/report/pages.h"
#include "pipetrain/sim/simulation_job.h"
#include "pipetrain/trace/chrome_trace.h"
#include "pipetrain/trace/svg_gantt.h"
#include "pipetrain/util/text.h"

namespace pipetrain::cli {
namespace {

struct SimulateArgs {
  sim::SimulationRequest request;
  std::string trace, svg, report;
  bool json = false;
};

void printReport(const sim::Report& r) {
  std::printf("schedule %s: %d stages, %d micro-batches per mini-batch (%lld samples)\n", r.schedule.c_str(),
              r.stages, r.microbatches, static_cast<long long>(r.samples_per_minibatch));
  std::printf("iteration time %.6g s, throughput %.6g samples/s, mean bubble %.1f%%\n", r.iteration_time,
              r.throughput, 100 * r.bubble_fraction);
  std::printf("%-5s %-12s %8s %12s %9s %14s\n", "rank", "device", "bubble", "activations", "versions", "peak memory");
  for (std::size_t i = 0; i < r.ranks.size(); ++i) {
    const auto& rr = r.ranks[i];
    std::printf("%-5zu %-12s %7.1f%% %12.3g %9d %14s\n", i, rr.device.c_str(), 100 * rr.bubble_fraction,
                rr.peak_activations, rr.weight_versions, text::humanBytes(rr.peak_memory_bytes).c_str());
  }
}

int run(const SimulateArgs& a) {
  const sim::SimulatedPlan s = sim::simulate(a.request);
  const sim::Evaluation& e = s.evaluation;
  if (!a.trace.empty()) trace::writeChromeTrace(e.timeline, a.trace);
  if (!a.svg.empty()) trace::writeSvgGantt(e.timeline, a.svg);
  if (!a.report.empty()) report::writeHtml(report::pageForSimulation(e, s.plan, "Simulation of " + s.origin), a.report);
  if (a.json) {
    json_io::Json j = e.report.toJson();
    if (!s.note.empty()) j["profile_note"] = s.note;
    std::cout << j.dump(2) << "\n";
  } else {
    if (!s.note.empty()) std::cout << "note: " << s.note << "\n";
    printReport(e.report);
    if (!a.trace.empty()) std::cout << "trace: " << a.trace << " (open in https://ui.perfetto.dev)\n";
    if (!a.svg.empty()) std::cout << "gantt: " << a.svg << "\n";
    if (!a.report.empty()) std::cout << "report: " << a.report << "\n";
  }
  return 0;
}

}  // namespace

Command addSimulateCommand(CLI::App& app) {
  auto a = std::make_shared<SimulateArgs>();
  CLI::App* cmd = app.add_subcommand("simulate", "Predict a plan's timeline, throughput, bubbles and memory");
  addOptions(cmd, sim::simulationOptions(a->request));
  cmd->add_option("--trace", a->trace, "write a Chrome trace (Perfetto) JSON");
  cmd->add_option("--svg", a->svg, "write an SVG Gantt chart");
  cmd->add_option("--report", a->report, "write an HTML report (the plan, the Gantt chart, per-rank bars)");
  cmd->add_flag("--json", a->json, "print the report as one JSON object");
  return {cmd, [a] { return run(*a); }};
}

}  // namespace pipetrain::cli
