// Planner search time: the chain DP (PipeDream partitioner with replication) on long
// chains and large hierarchical clusters, and how it grows with layers and devices; and
// the whole exploration (`plan --schedule auto`: every schedule x micro-batch size x
// width, scored by the simulator) against devices, with its peak resident memory.
// Run: build/planner_bench   (or `make bench`)
#include <benchmark/benchmark.h>

#include <sys/resource.h>

#include <random>

#include "pipetrain/planner/chain_partition.h"
#include "pipetrain/planner/explore.h"
#include "pipetrain/planner/graph_partition.h"
#include "../tests/core/fork_join.h"

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
    objective = graph_dp ? planner::partitionGraph(graph, cluster, o, {}).partition.objective
                         : planner::partitionChain(graph, cluster, o, {}).partition.objective;
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

}  // namespace

BENCHMARK_MAIN();
