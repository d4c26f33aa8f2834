// The planner against an oracle under fixed schedules (issue 80): on PipeDream's published
// profiles (bench/profiles) and its cluster's shape at 32 and 128 GPUs, at the profile's
// own micro-batch size and 1.5 micro-batches per GPU, `plan --schedule S` for each
// schedule with one stage per rank, against the best plan planner/oracle.h's local search
// finds: walks from random plans, and walks from the planner's own best plans. Both are
// priced by the same simulator. The goal: the planner's choice >= 0.99 x the oracle's.
// Run: build/planner_oracle [--models resnet50,vgg16] [--gpus 32,128] [--schedules gpipe,2bw]
//        [--simulations 2000] [--restarts 12] [--out bench/results/planner-oracle-DATE.json]
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "pipedream_cluster.h"
#include "pipetrain/planner/explore.h"
#include "pipetrain/planner/oracle.h"
#include "pipetrain/util/json_io.h"

namespace {

using namespace pipetrain;

struct Row {
  std::string model, schedule;
  int gpus = 0;
  double planner = 0, planner_seconds = 0, random = 0, seeded = 0;
  int64_t simulated = 0;
  json_io::Json chosen, best;

  double oracle() const { return std::max(random, seeded); }
  json_io::Json toJson() const {
    return {{"model", model},   {"gpus", gpus},           {"schedule", schedule},   {"planner", planner},
            {"planner_seconds", planner_seconds},        {"oracle_random", random}, {"oracle_from_planner", seeded},
            {"ratio", oracle() > 0 ? planner / oracle() : 0}, {"simulated", simulated},
            {"chosen", chosen}, {"oracle_best", best}};
  }
};

Row runCase(const std::string& model, int gpus, const std::string& schedule, int64_t simulations, int restarts) {
  const graph::LayerGraph graph = graph::LayerGraph::load(bench::publishedProfile(model));
  const cluster::ClusterSpec cluster = bench::pipedreamCluster(gpus);
  const int64_t b = graph.batchSize();
  const int m = gpus * 3 / 2;
  Row row;
  row.model = model;
  row.schedule = schedule;
  row.gpus = gpus;

  planner::ExploreOptions o;
  o.global_batch = b * m;
  o.microbatch_sizes = {b};
  o.schedule = schedule;
  const auto start = std::chrono::steady_clock::now();
  std::vector<plan::Plan> starts;
  try {
    const planner::Exploration e = planner::explore(graph, cluster, o);
    row.planner_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    row.planner = e.best().report.throughput;
    row.chosen = e.best().plan.toJson();
    for (std::size_t i = 0; i < std::min<std::size_t>(e.ranked.size(), 3); ++i) starts.push_back(e.ranked[i].plan);
  } catch (const Error& e) {
    std::cerr << model << " on " << gpus << " GPUs, " << schedule << ": no plan (" << e.what() << ")\n";
  }

  planner::OracleOptions oracle;
  oracle.schedule = schedule;
  oracle.microbatch_size = b;
  oracle.microbatches = m;
  oracle.max_simulations = simulations;
  oracle.restarts = restarts;
  const planner::OracleResult random = planner::searchLocally(graph, cluster, oracle);
  oracle.restarts = 0;
  const planner::OracleResult seeded = planner::searchLocally(graph, cluster, oracle, starts);
  row.random = random.best ? random.report.throughput : 0;
  row.seeded = seeded.best ? seeded.report.throughput : 0;
  row.simulated = random.simulated + seeded.simulated;
  const planner::OracleResult& best = row.random >= row.seeded ? random : seeded;
  if (best.best) row.best = best.best->toJson();
  return row;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t from = 0;
  for (std::size_t comma; (comma = s.find(',', from)) != std::string::npos; from = comma + 1)
    out.push_back(s.substr(from, comma - from));
  out.push_back(s.substr(from));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The planner against an oracle under fixed schedules, on PipeDream's published profiles"};
  std::string models = "alexnet,vgg16,gnmt,resnet50,inception-v3", gpus = "32,128",
              schedules = "gpipe,1f1b,zb-h1,zb-h2,pipedream,2bw,pipemare", out;
  int64_t simulations = 2000;
  int restarts = 12;
  app.add_option("--models", models, "published profiles, comma-separated");
  app.add_option("--gpus", gpus, "cluster sizes (servers of 8), comma-separated");
  app.add_option("--schedules", schedules, "schedules with one stage per rank, comma-separated");
  app.add_option("--simulations", simulations, "the oracle's simulations per search (two searches a case)");
  app.add_option("--restarts", restarts, "the oracle's walks from random plans");
  app.add_option("--out", out, "write the rows as JSON here");
  CLI11_PARSE(app, argc, argv);

  json_io::Json rows = json_io::Json::array();
  std::printf("| model | GPUs | schedule | planner (search s) | oracle, random walks | oracle, from the planner | planner / oracle |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  try {
    for (const std::string& model : split(models))
      for (const std::string& size : split(gpus))
        for (const std::string& schedule : split(schedules)) {
          const Row r = runCase(model, std::stoi(size), schedule, simulations, restarts);
          std::printf("| %s | %d | %s | %.0f (%.2f s) | %.0f | %.0f | %.3f |\n", r.model.c_str(), r.gpus,
                      r.schedule.c_str(), r.planner, r.planner_seconds, r.random, r.seeded,
                      r.oracle() > 0 ? r.planner / r.oracle() : 0.0);
          std::fflush(stdout);
          rows.push_back(r.toJson());
          if (!out.empty()) std::ofstream(out) << rows.dump(1) << "\n";
        }
  } catch (const std::exception& e) {
    std::cerr << "planner_oracle: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
