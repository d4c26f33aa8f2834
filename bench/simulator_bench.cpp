// Simulator speed: simulated actions per second on large 1F1B and ZB-H1 Programs; and what
// predicting one replicated plan of PipeDream's costs as its cluster grows (the unit of the
// planner's refinement budget, refine.cpp's simulationWork).
// Run: build/simulator_bench   (or `make bench`)
#include <benchmark/benchmark.h>

#include "pipedream_cluster.h"
#include "pipetrain/plan/plan_program.h"
#include "pipetrain/planner/neighbours.h"
#include "pipetrain/schedule/program_check.h"
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

// predictReport of PipeDream's ResNet-50 under 1f1b in 3 stages, layers cut 129 + 17 + 30
// on 3/4, 1/8 and 1/8 of `gpus` GPUs (the planner's choice under 2bw on 32), at the
// oracle bench's 1.5 micro-batches per GPU. The counters are the two ways to count the
// work: ranks x micro-batches, and stages x micro-batches + ranks.
void predictReplicatedPlan(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0)), m = gpus * 3 / 2;
  const auto graph = graph::LayerGraph::load(bench::publishedProfile("resnet50"));
  const auto cluster = bench::pipedreamCluster(gpus);
  plan::Plan like;
  like.schedule.name = "1f1b";
  like.microbatch_size = graph.batchSize();
  like.microbatches = m;
  const plan::Plan p =
      planner::planOfRuns(like, {{0, 129, 146, graph.size()}, {0, gpus * 3 / 4, gpus * 7 / 8, gpus}}, graph, cluster);
  for (auto _ : state) benchmark::DoNotOptimize(sim::predictReport(graph, cluster, p).throughput);
  state.counters["ranks_x_m"] = static_cast<double>(gpus) * m;
  state.counters["stages_x_m_plus_ranks"] = 3.0 * m + gpus;
}

BENCHMARK(predictReplicatedPlan)->Arg(32)->Arg(128)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(simulateSchedule, one_f_one_b, std::string("1f1b"))
    ->Args({8, 64})->Args({64, 1024})->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(simulateSchedule, zb_h1, std::string("zb-h1"))
    ->Args({64, 1024})->Unit(benchmark::kMillisecond);
BENCHMARK(buildAndValidate)->Args({64, 1024})->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
