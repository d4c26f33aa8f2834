// Planner search time: the chain DP (PipeDream partitioner with replication) on long
// chains and large hierarchical clusters, and how it grows with layers and devices; and
// the whole exploration (`plan --schedule auto`: every schedule x micro-batch size x
// width, scored by the simulator) against devices, with its peak resident memory.
// And `plan` on layer profiles nobody here wrote: PipeDream's published ones
// (bench/profiles) on PipeDream's cluster shape at 4 to 1024 GPUs, for each partitioner;
// and on the example graphs (examples/graphs) at batch 8192 on 1024 and 8192 GPUs in
// three levels, the goal being under 1 s and under 10 s, for throughput and for time to
// accuracy (objective 1).
// Run: build/planner_bench   (or `make bench`);
//      build/planner_bench --benchmark_filter=published --benchmark_counters_tabular=true
//      build/planner_bench --benchmark_filter=examples --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "pipetrain/planner/chain_partition.h"
#include "pipetrain/planner/explore.h"
#include "pipetrain/planner/graph_partition.h"
#include "pipetrain/planner/time_to_target.h"
#include "pipetrain/sim/evaluate.h"
#include "pipetrain/util/allocator.h"
#include "../tests/core/fork_join.h"
#include "pipedream_cluster.h"

namespace {

using namespace pipetrain;

// Layers of uneven cost, as real models have.
graph::LayerGraph randomChain(int layers) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> t(1e-4, 1e-3);
  std::vector<graph::Layer> v;
  for (int i = 0; i < layers; ++i) {
    graph::Layer l;
    l.name = "l" + std::to_string(i);
    if (i > 0) l.inputs = {v.back().name};
    l.forward_seconds = t(rng);
    l.backward_input_seconds = t(rng);
    l.backward_weight_seconds = t(rng);
    l.output_bytes = 1 << 20;
    l.saved_activation_bytes = 1 << 20;
    l.param_bytes = 4 << 20;
    l.optimizer_state_bytes = 8 << 20;
    v.push_back(l);
  }
  return graph::LayerGraph(v, 1);
}

// 8 devices per node (NVLink-like), 8 nodes per rack, racks joined by a slower network.
cluster::ClusterSpec threeLevels(int devices) {
  std::vector<cluster::Device> d;
  for (int i = 0; i < devices; ++i) d.push_back({"gpu" + std::to_string(i), "gpu", 1.0, int64_t{80} << 30});
  std::vector<cluster::Level> levels{{"node", 8, 300e9, 2e-6}, {"rack", 64, 25e9, 5e-6}};
  if (devices > 64) levels.push_back({"cluster", devices, 12.5e9, 1e-5});
  return cluster::ClusterSpec(d, levels, {});
}

void partition(benchmark::State& state) {
  const int layers = static_cast<int>(state.range(0)), devices = static_cast<int>(state.range(1));
  const auto graph = randomChain(layers);
  const auto cluster = threeLevels(devices);
  planner::PartitionOptions o;
  o.microbatch_size = 4;
  o.microbatches = 64;
  o.max_blocks = static_cast<int>(state.range(2));
  int stages = 0;
  for (auto _ : state) stages = static_cast<int>(planner::partitionChain(graph, cluster, o, {}).plan.numStages());
  state.counters["stages"] = stages;
}

// The target: 1000 layers on 1024 devices in three levels, in under a second.
BENCHMARK(partition)->Args({1000, 1024, 128})->Unit(benchmark::kMillisecond);
// Growth with devices (chain planned over 128 blocks).
BENCHMARK(partition)->Args({1000, 64, 128})->Args({1000, 256, 128})->Unit(benchmark::kMillisecond);
// Growth with layers, every layer its own block (no coarsening).
BENCHMARK(partition)->Args({32, 1024, 32})->Args({64, 1024, 64})->Args({128, 1024, 128})->Args({256, 1024, 256})
    ->Unit(benchmark::kMillisecond);

// `plan --schedule auto` for a chain of `layers` on `devices` at a global batch (every
// power-of-two micro-batch size dividing it), with the shortcuts (ExploreOptions::prune)
// as `plan` takes them, or without (prune 0: the exhaustive reference).
void exploration(benchmark::State& state) {
  const auto graph = randomChain(static_cast<int>(state.range(3)));
  const auto cluster = threeLevels(static_cast<int>(state.range(0)));
  planner::ExploreOptions o;
  o.global_batch = state.range(1);
  o.prune = state.range(2) != 0;
  planner::Exploration e;
  for (auto _ : state) e = planner::explore(graph, cluster, o);
  state.counters["simulated"] = static_cast<double>(e.ranked.size());
  state.counters["pruned"] = e.pruned;
  state.counters["pruned_combinations"] = e.pruned_combinations;
  state.counters["throughput"] = e.best().report.throughput;  // the choice's, to compare with the reference
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  state.counters["peak_rss_MiB"] = usage.ru_maxrss / 1024.0;  // of the process so far
}
// GraphPipe's partitioner against the chain DP on the same multi-branch graph: the
// paper's multi-modal transformer shape (`branches` x `layers` equal transformer
// layers over the input, then a fusion head) on 3-level clusters of `devices`.
graph::LayerGraph branches(int count, int layers) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<double> t(0.8e-3, 1.2e-3);
  graph::Layer fusion;
  fusion.name = "fusion";
  fusion.forward_seconds = fusion.backward_input_seconds = fusion.backward_weight_seconds = 2e-4;
  fusion.output_bytes = 1 << 10;
  return testing::forkJoin(count, layers, [&](int, int) {
    graph::Layer l;
    l.forward_seconds = t(rng);
    l.backward_input_seconds = l.backward_weight_seconds = l.forward_seconds;
    l.output_bytes = l.saved_activation_bytes = 1 << 20;
    l.param_bytes = 4 << 20;
    l.optimizer_state_bytes = 8 << 20;
    return l;
  }, fusion);
}

void graphPartition(benchmark::State& state) {
  const auto graph = branches(static_cast<int>(state.range(1)), static_cast<int>(state.range(2)));
  const auto cluster = threeLevels(static_cast<int>(state.range(0)));
  planner::PartitionOptions o;
  o.microbatch_size = 4;
  o.microbatches = 64;
  const bool graph_dp = state.range(3) != 0;
  double objective = 0;
  for (auto _ : state) {
    try {
      objective = graph_dp ? planner::partitionGraph(graph, cluster, o, {}).partition.objective
                           : planner::partitionChain(graph, cluster, o, {}).partition.objective;
    } catch (const planner::GraphSearchGaveUp& e) {
      state.SkipWithError(e.what());  // past the budget: the case's finding, not the bench's end
      return;
    }
  }
  state.counters["bottleneck_ms"] = objective * 1e3;
}
BENCHMARK(graphPartition)
    ->ArgNames({"devices", "branches", "layers", "graph"})
    ->Args({8, 4, 8, 1})->Args({8, 4, 8, 0})->Args({16, 4, 8, 1})->Args({16, 4, 8, 0})
    ->Args({32, 4, 8, 1})->Args({32, 4, 8, 0})->Args({64, 4, 8, 1})->Args({32, 7, 4, 1})->Args({32, 7, 4, 0})
    ->Iterations(1)->Unit(benchmark::kMillisecond);

// Growth with devices (the targets: under 1 s at 1024, under 10 s at 8192),
// then with layers.
BENCHMARK(exploration)
    ->ArgNames({"devices", "batch", "prune", "layers"})
    ->Args({4, 1024, 1, 64})->Args({32, 1024, 1, 64})->Args({256, 1024, 1, 64})->Args({1024, 1024, 1, 64})
    ->Args({1024, 8192, 1, 64})->Args({8192, 8192, 1, 64})
    ->Args({1024, 1024, 1, 256})->Args({1024, 1024, 1, 1000})
    ->Iterations(1)->Unit(benchmark::kMillisecond);
// The exhaustive reference, whose choice the shortcuts must match ("throughput").
BENCHMARK(exploration)
    ->ArgNames({"devices", "batch", "prune", "layers"})
    ->Args({4, 1024, 0, 64})->Args({32, 1024, 0, 64})->Args({256, 1024, 0, 64})
    ->Iterations(1)->Unit(benchmark::kMillisecond);

// What one `plan` run measured, in its own process (so that peak memory is its own).
struct PlanRun {
  double seconds = 0, peak_mib = 0, throughput = 0, simulated_throughput = 0;
  int stages = 0, microbatch_size = 0;
  bool failed = false;
};

// Stands in for calibration's training runs when the bench times the time-to-accuracy
// objective: loss curves whose progress per sample follows sqrt(B / s) / (1 + delay) for
// a rule stepping every s samples with its largest delay. A model, not a measurement:
// what the bench times is the search, the choice of rules and the ranking.
class ModeledCalibrator : public planner::Calibrator {
 public:
  ModeledCalibrator() { calibration_.samples = 1 << 20; }
  planner::Calibration& calibration() override { return calibration_; }
  void measure(const planner::RuleToCalibrate& r, bool repeat) override {
    const double batch = static_cast<double>(r.plan.samplesPerMinibatch());
    const int delay = *std::max_element(r.rule.stage_delays.begin(), r.rule.stage_delays.end());
    const double rate = std::sqrt(batch / static_cast<double>(r.rule.samples_per_step)) / (1 + delay) * (repeat ? 0.97 : 1);
    planner::LossCurve curve;
    for (int i = 0; i <= 10; ++i) {
      curve.samples.push_back(calibration_.samples * i / 10);
      curve.loss.push_back(2.0 / (1.0 + rate * i));
    }
    (repeat ? calibration_.repeat : calibration_.curves[r.rule.key]) = curve;
  }

 private:
  planner::Calibration calibration_;
};

PlanRun planInChild(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                    const planner::ExploreOptions& o) {
  int fds[2];
  if (pipe(fds) != 0) return {0, 0, 0, 0, 0, 0, true};
  const pid_t pid = fork();
  if (pid == 0) {
    util::applyHeapPolicyOfEnvironment();  // as `pipetrain` (src/cli/main.cpp) plans
    PlanRun run;
    try {
      const auto start = std::chrono::steady_clock::now();
      ModeledCalibrator calibrator;
      const planner::Exploration e = planner::explore(
          graph, cluster, o, planner::ObjectiveInputs{[&]() -> planner::Calibrator& { return calibrator; }});
      run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      run.throughput = e.best().report.throughput;
      // The choice simulated whole, without the extrapolation the planner ranks by.
      run.simulated_throughput = sim::simulatedReport(graph, cluster, e.best().plan).throughput;
      run.stages = e.best().plan.numStages();
      run.microbatch_size = static_cast<int>(e.best().plan.microbatch_size);
    } catch (const std::exception&) {
      run.failed = true;
    }
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    run.peak_mib = usage.ru_maxrss / 1024.0;
    const ssize_t written = write(fds[1], &run, sizeof run);
    _exit(written == sizeof run ? 0 : 1);
  }
  close(fds[1]);
  PlanRun run;
  if (read(fds[0], &run, sizeof run) != sizeof run) run.failed = true;
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  return run;
}

// `plan --batch 4096` with every default but the partitioner (0 auto, 1 chain, 2 graph).
void published(benchmark::State& state) {
  const std::string model = bench::kPublished[state.range(0)];
  const auto graph = graph::LayerGraph::load(bench::publishedProfile(model));
  const auto cluster = bench::pipedreamCluster(static_cast<int>(state.range(1)));
  planner::ExploreOptions o;
  o.global_batch = 4096;
  o.partitioner = state.range(2) == 0 ? planner::Partitioner::kAuto
                  : state.range(2) == 1 ? planner::Partitioner::kChain : planner::Partitioner::kGraph;
  PlanRun run;
  for (auto _ : state) {
    run = planInChild(graph, cluster, o);
    state.SetIterationTime(run.seconds);
  }
  state.SetLabel(model + (run.failed ? " (no plan)" : ""));
  state.counters["peak_MiB"] = run.peak_mib;
  state.counters["throughput"] = run.throughput;  // predicted, samples/s
  state.counters["simulated"] = run.simulated_throughput;  // the choice simulated whole
  state.counters["stages"] = run.stages;
  state.counters["microbatch"] = run.microbatch_size;
}
BENCHMARK(published)
    ->ArgNames({"model", "gpus", "partitioner"})
    ->ArgsProduct({{0, 1, 2, 3, 4}, {4, 32, 128, 1024}, {0, 1, 2}})
    ->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);

const char* const kExampleGraphs[] = {"gpt", "resnet50", "vgg16", "dlrm", "candle-uno", "multimodal", "fmnist-branch"};

// Nodes of 8 GPUs, racks of 128, the network: three levels, memory of 40 GiB each.
cluster::ClusterSpec threeLevelCluster(int gpus) {
  std::vector<cluster::Device> d;
  for (int i = 0; i < gpus; ++i) d.push_back({"gpu" + std::to_string(i), "gpu", 300.0, int64_t{40} << 30});
  std::vector<cluster::Level> levels{{"node", 8, 150e9, 5e-6}, {"rack", 128, 25e9, 1e-5}, {"network", gpus, 12.5e9, 2e-5}};
  return cluster::ClusterSpec(d, levels, {});
}

// `plan --graph examples/graphs/G.json --batch 8192` with every default; with objective 1
// `--objective time-to-accuracy --allow-async` (a modeled calibration, above).
void examples(benchmark::State& state) {
  const std::string model = kExampleGraphs[state.range(0)];
  const auto graph = graph::LayerGraph::load(std::string(PIPETRAIN_SOURCE_DIR) + "/examples/graphs/" + model + ".json");
  planner::ExploreOptions o;
  o.global_batch = 8192;
  if (state.range(2) == 1) {
    o.objective = &planner::objectiveNamed("time-to-accuracy");
    o.allow_async = true;
  }
  PlanRun run;
  for (auto _ : state) {
    run = planInChild(graph, threeLevelCluster(static_cast<int>(state.range(1))), o);
    state.SetIterationTime(run.seconds);
  }
  state.SetLabel(model + (run.failed ? " (no plan)" : ""));
  state.counters["peak_MiB"] = run.peak_mib;
  state.counters["throughput"] = run.throughput;
  state.counters["stages"] = run.stages;
}
BENCHMARK(examples)
    ->ArgNames({"graph", "gpus", "objective"})
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6}, {1024, 8192}, {0, 1}})
    ->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
