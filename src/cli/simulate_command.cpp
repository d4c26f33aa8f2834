// `pipetrain simulate`: predict a schedule's timeline and metrics, from a plan or from
// the synthetic --uniform shortcut; optionally draw it.
#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.h"
#include "options.h"
#include "pipetrain/planner/profile_fit.h"
#include "pipetrain/report/pages.h"
#include "pipetrain/schedule/csv_schedule.h"
#include "pipetrain/sim/evaluate.h"
#include "pipetrain/trace/chrome_trace.h"
#include "pipetrain/trace/svg_gantt.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/text.h"

namespace pipetrain::cli {
namespace {

struct SimulateArgs {
  std::string graph, cluster, plan;
  plan::ScheduleOptions schedule;
  int stages = 0;
  int microbatches = 8;
  int minibatches = 1;
  std::vector<double> uniform;
  double overlap_factor = 0;  // 0 = the profile's
  std::string csv, trace, svg, report;
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

// A plan that runs out of memory is not a plan: say which rank and by how much.
void checkFits(const sim::Report& r, const std::string& origin) {
  for (std::size_t i = 0; i < r.ranks.size(); ++i) {
    const auto& rr = r.ranks[i];
    if (rr.peak_memory_bytes > rr.memory_capacity_bytes)
      throw Error(origin + ": under " + r.schedule + ", rank " + std::to_string(i) + " needs " +
                  text::humanBytes(rr.peak_memory_bytes) + " at its peak, but device '" + rr.device + "' has " +
                  text::humanBytes(rr.memory_capacity_bytes) + " (fewer micro-batches in flight, more stages, or a "
                  "larger device would help)");
  }
}

int run(const SimulateArgs& a) {
  const bool from_files = !a.graph.empty() || !a.cluster.empty() || !a.plan.empty();
  if (from_files && (a.graph.empty() || a.cluster.empty() || a.plan.empty()))
    throw Error("simulate: --graph, --cluster and --plan go together");
  if (from_files == !a.uniform.empty())
    throw Error("simulate: give either --graph G --cluster C --plan P, or --schedule NAME --stages P "
                "--microbatches M --uniform F,B[,W]");

  // Everything the evaluation refers to lives here.
  graph::LayerGraph graph;
  cluster::ClusterSpec cluster;
  plan::Plan plan;
  std::string origin, note;
  if (from_files) {
    graph = graph::LayerGraph::load(a.graph);
    planner::ProfileFit fit = planner::fitProfileToCluster(graph, cluster::ClusterSpec::load(a.cluster));
    cluster = std::move(fit.cluster);
    note = std::move(fit.note);
    plan = plan::Plan::load(a.plan);
    plan::validate(plan, graph, cluster, a.plan);
    origin = a.plan;
  } else {
    if (a.uniform.size() < 2 || a.uniform.size() > 3) throw Error("--uniform takes F,B or F,B,W (seconds)");
    if (a.stages < 1) throw Error("--stages must be at least 1");
    schedule::checkScheduleName(a.schedule.name);
    auto u = sim::uniformScenario(a.schedule, a.stages, a.microbatches, a.uniform[0], a.uniform[1],
                                  a.uniform.size() == 3 ? a.uniform[2] : 0.0);
    graph = std::move(u.graph);
    cluster = std::move(u.cluster);
    plan = std::move(u.plan);
    origin = "--uniform";
  }
  if (a.overlap_factor != 0) graph.setOverlapFactor(a.overlap_factor);

  sim::Evaluation e;
  if (!a.csv.empty()) {
    const sim::CostModel costs(graph, cluster, plan);
    const schedule::CsvSchedule csv = schedule::readCsvSchedule(text::readFile(a.csv), a.csv, costs.dag());
    schedule::validateCsvSchedule(csv);  // errors with the file's line and column
    e = sim::evaluateProgram(csv.program, costs);
  } else {
    e = sim::evaluatePlan(graph, cluster, plan, a.minibatches);
  }
  checkFits(e.report, origin);

  if (!a.trace.empty()) trace::writeChromeTrace(e.timeline, a.trace);
  if (!a.svg.empty()) trace::writeSvgGantt(e.timeline, a.svg);
  if (!a.report.empty()) report::writeHtml(report::pageForSimulation(e, plan, "Simulation of " + origin), a.report);
  if (a.json) {
    json_io::Json j = e.report.toJson();
    if (!note.empty()) j["profile_note"] = note;
    std::cout << j.dump(2) << "\n";
  } else {
    if (!note.empty()) std::cout << "note: " << note << "\n";
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
  cmd->add_option("--graph", a->graph, "layer graph JSON (with --cluster and --plan)");
  cmd->add_option("--cluster", a->cluster, "cluster spec JSON");
  cmd->add_option("--plan", a->plan, "plan JSON");
  cmd->add_option("--schedule", a->schedule.name, "schedule for --uniform")->capture_default_str();
  cmd->add_option("--stages", a->stages, "ranks for --uniform")->check(positive());
  cmd->add_option("--microbatches", a->microbatches, "micro-batches per mini-batch for --uniform")
      ->check(positive())->capture_default_str();
  cmd->add_option("--chunks", a->schedule.chunks, "interleaved: stages per rank")->check(positive());
  cmd->add_flag("--vertical-sync", a->schedule.vertical_sync, "pipedream: vertical sync");
  cmd->add_option("--uniform", a->uniform, "equal stage costs F,B[,W] in seconds (W = weight-gradient part of B), "
                  "free communication")->delimiter(',');
  cmd->add_option("--minibatches", a->minibatches, "mini-batches in the simulated program (and the trace)")
      ->check(positive())->capture_default_str();
  cmd->add_option("--overlap-factor", a->overlap_factor,
                  "time of an overlapped forward+backward pair (dualpipev) as a share of the two in sequence, "
                  "0.5..1 (default: the graph's overlap_factor, else 1)");
  cmd->add_option("--csv", a->csv, "simulate this per-rank CSV schedule instead of a generated one");
  cmd->add_option("--trace", a->trace, "write a Chrome trace (Perfetto) JSON");
  cmd->add_option("--svg", a->svg, "write an SVG Gantt chart");
  cmd->add_option("--report", a->report, "write an HTML report (the plan, the Gantt chart, per-rank bars)");
  cmd->add_flag("--json", a->json, "print the report as one JSON object");
  return {cmd, [a] { return run(*a); }};
}

}  // namespace pipetrain::cli
