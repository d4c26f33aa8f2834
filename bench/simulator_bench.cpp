// Simulator speed: simulated actions per second on large 1F1B and ZB-H1 Programs.
// Run: build/simulator_bench   (or `make bench`)
#include <benchmark/benchmark.h>

#include "pipetrain/schedule/program_check.h"
#include "pipetrain/plan/plan_program.h"
#include "pipetrain/sim/evaluate.h"
#include "pipetrain/sim/simulator.h"

namespace {

using namespace pipetrain;

void simulateSchedule(benchmark::State& state, const std::string& name) {
  const int p = static_cast<int>(state.range(0)), m = static_cast<int>(state.range(1));
  plan::ScheduleOptions options;
  options.name = name;
  // Finite bandwidth, so transfers and port queues are simulated too.
  auto u = sim::uniformScenario(options, p, m, 1e-3, 2e-3, name == "zb-h1" ? 1e-3 : 0.0);
  u.graph = graph::LayerGraph::uniformChain(p, 1e-3, 1e-3, name == "zb-h1" ? 1e-3 : 0.0, 1 << 20, 1 << 20);
  u.cluster = cluster::ClusterSpec::uniform(p, int64_t{1} << 40, 10e9, 5e-6);
  const sim::CostModel costs(u.graph, u.cluster, u.plan);
  const schedule::Program program = plan::programForPlan(u.plan, costs.dag(), 1);
  std::size_t actions = 0;
  for (const auto& rank : program.ranks) actions += rank.size();
  for (auto _ : state) benchmark::DoNotOptimize(sim::simulate(program, costs).makespan());
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * actions));
  state.counters["actions"] = static_cast<double>(actions);
}

void buildAndValidate(benchmark::State& state) {
  schedule::ScheduleSpec spec;
  spec.microbatches = static_cast<int>(state.range(1));
  const auto dag = schedule::chainDag(static_cast<int>(state.range(0)));
  for (auto _ : state) schedule::validate(schedule::buildProgram(spec, dag));
}

BENCHMARK_CAPTURE(simulateSchedule, one_f_one_b, std::string("1f1b"))
    ->Args({8, 64})->Args({64, 1024})->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(simulateSchedule, zb_h1, std::string("zb-h1"))
    ->Args({64, 1024})->Unit(benchmark::kMillisecond);
BENCHMARK(buildAndValidate)->Args({64, 1024})->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
