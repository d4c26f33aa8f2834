#include "pipetrain/planner/chain_partition.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <regex>

#include "../expect_error.h"
#include "partition_fixtures.h"
#include "pipetrain/planner/neighbours.h"
#include "pipetrain/sim/evaluate.h"

namespace pipetrain::planner {
namespace {

using fixtures::kInfinity;
using fixtures::randomChain;
using fixtures::twoLevelCluster;

// Every tiling of blocks onto a device prefix, the objective of each priced by the
// problem: the optimum the DP must reach.
double exhaustiveOptimum(const ChainProblem& problem, int block, int device, std::vector<StageChoice>& stages) {
  if (block == problem.numBlocks())
    return problem.options().use_all_devices && device < problem.numDevices() ? kInfinity : problem.objective(stages);
  double best = kInfinity;
  for (int j = block + 1; j <= problem.numBlocks(); ++j)
    for (int d = device + 1; d <= problem.numDevices(); ++d) {
      if (!problem.allowedDevices(device, d)) continue;
      stages.push_back({block, j, device, d});
      best = std::min(best, exhaustiveOptimum(problem, j, d, stages));
      stages.pop_back();
    }
  return best;
}

TEST(ChainPartition, MessagesHostCostMovesTheCutToASmallerActivation) {
  // Four layers of F = I = 1 s; the middle cut carries 2 MB, the others 1 and 2 kB. On
  // two devices whose hosts copy messages at 1 MB/s (and the wire is free), the even
  // split costs each stage 4 s of compute and 2 x 2 s of copying; cutting after the
  // first layer costs the longer stage 6 s and 2 x 1 ms, after the third 6 s and 2 x 2 ms.
  // (The stage that grows from the end past the big cut gets cheaper again: the DP must
  // not stop there.)
  std::vector<graph::Layer> layers;
  for (int i = 0; i < 4; ++i) {
    graph::Layer l;
    l.name = "l" + std::to_string(i);
    if (i > 0) l.inputs = {layers.back().name};
    l.forward_seconds = l.backward_input_seconds = 1;
    l.output_bytes = i == 0 ? 1000 : i == 1 ? 2000000 : 2000;
    layers.push_back(l);
  }
  const graph::LayerGraph graph(layers, 1);
  auto cluster = [](cluster::HostCost host) {
    return cluster::ClusterSpec({{"a", "cpu", 1.0, 1 << 30}, {"b", "cpu", 1.0, 1 << 30}},
                                {{"host", 2, kInfinity, 0.0, host}}, {});
  };
  PartitionOptions o;
  o.use_all_devices = true;
  const cluster::ClusterSpec free_messages = cluster({}), copied = cluster({0.0, 1e6});
  const Partition even = solveChain(ChainProblem(graph, free_messages, o));
  ASSERT_EQ(even.stages.size(), 2u);
  EXPECT_EQ(even.stages[0].end_block, 2);
  EXPECT_DOUBLE_EQ(even.objective, 4);
  const Partition uneven = solveChain(ChainProblem(graph, copied, o));
  ASSERT_EQ(uneven.stages.size(), 2u);
  EXPECT_EQ(uneven.stages[0].end_block, 1);
  EXPECT_NEAR(uneven.objective, 6 + 2 * 0.001, 1e-12);
}

TEST(ChainPartition, DynamicProgramReachesTheExhaustiveOptimum) {
  std::mt19937 rng(7);
  int compared = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int layers = 1 + trial % 12;
    const auto graph = randomChain(rng, layers);
    const bool mixed = trial % 2 == 1;
    // Memory from generous to tight, so that it sometimes decides.
    const int64_t memory = trial % 3 == 0 ? int64_t{1} << 40 : 150000 + 50000 * (trial % 5);
    const auto cluster = twoLevelCluster(mixed, memory, trial % 5 == 1);
    for (const std::string schedule : {"1f1b", "gpipe", "pipemare"}) {
      PartitionOptions o;
      o.schedule = schedule;
      o.microbatch_size = 2;
      o.microbatches = trial % 4 == 0 ? 6 : 4;
      o.assumed_depth = 1 + trial % 3;
      const ChainProblem problem(graph, cluster, o);
      std::vector<StageChoice> scratch;
      const double optimum = exhaustiveOptimum(problem, 0, 0, scratch);
      if (optimum == kInfinity) {
        testing::expectError([&] { solveChain(problem); }, {"no partition fits memory"});
        continue;
      }
      const Partition p = solveChain(problem);
      EXPECT_NEAR(p.objective, optimum, 1e-9 * optimum) << "trial " << trial << " " << schedule;
      EXPECT_DOUBLE_EQ(problem.objective(p.stages), p.objective);
      ++compared;
    }
  }
  EXPECT_GT(compared, 80);  // the rest fit nowhere, and said so
}

// On given device blocks, the DP's cut of the layers is the best of every cut (each
// stage one run of blocks, non-empty), replicas straddling nodes included, with the
// transfers hidden behind compute or added to it.
TEST(ChainPartition, OnGivenDevicesTheCutIsTheExhaustiveOptimum) {
  std::mt19937 rng(11);
  int compared = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int layers = 2 + trial % 9;
    const auto graph = randomChain(rng, layers);
    const int64_t memory = trial % 3 == 0 ? int64_t{1} << 40 : 150000 + 50000 * (trial % 5);
    const auto cluster = twoLevelCluster(trial % 2 == 1, memory, trial % 5 == 1);
    const std::vector<std::vector<int>> shapes{{0, 1, 4}, {0, 3, 4}, {0, 2, 3}, {0, 1, 2, 3, 4}};
    for (const std::vector<int>& bounds : shapes) {
      const int stages = static_cast<int>(bounds.size()) - 1;
      if (stages > layers) continue;
      PartitionOptions o;
      o.schedule = trial % 2 ? "gpipe" : "1f1b";
      o.microbatch_size = 2;
      o.microbatches = 6;
      o.assumed_depth = stages;
      const ChainProblem problem(graph, cluster, o);
      // Under kSerialized a stage's time adds the transfers over both its cuts.
      const Transfers transfers = trial % 4 < 2 ? Transfers::kOverlapped : Transfers::kSerialized;
      auto objective = [&](const std::vector<StageChoice>& choice) {
        if (transfers == Transfers::kOverlapped) return problem.objective(choice);
        double worst = 0;
        for (std::size_t s = 0; s < choice.size(); ++s) {
          const StageChoice& c = choice[s];
          const DeviceBlock block = problem.deviceBlock(c.first_device, c.end_device);
          double t = problem.stageSeconds(c.first_block, c.end_block, block) +
                     problem.hostSeconds(c.first_block, c.end_block, block) +
                     problem.boundarySeconds(c.first_block, c.first_device);
          if (s + 1 < choice.size()) t += problem.boundarySeconds(c.end_block, c.end_device);
          worst = std::max({worst, t, problem.boundarySeconds(c.first_block, c.first_device)});
        }
        return worst;
      };
      double optimum = kInfinity;
      for (const std::vector<int>& cut : everySplit(problem.numBlocks(), stages, 1000)) {
        std::vector<StageChoice> choice;
        for (int s = 0; s < stages; ++s) choice.push_back({cut[s], cut[s + 1], bounds[s], bounds[s + 1]});
        optimum = std::min(optimum, objective(choice));
      }
      const std::optional<Partition> p = solveChainOnDevices(problem, bounds, transfers);
      if (optimum == kInfinity) {
        EXPECT_FALSE(p.has_value()) << "trial " << trial;
        continue;
      }
      ASSERT_TRUE(p.has_value()) << "trial " << trial;
      EXPECT_NEAR(p->objective, optimum, 1e-9 * optimum) << "trial " << trial;
      EXPECT_DOUBLE_EQ(objective(p->stages), p->objective);
      for (int s = 0; s < stages; ++s) EXPECT_EQ(p->stages[s].first_device, bounds[s]);
      ++compared;
    }
  }
  EXPECT_GT(compared, 60);
  PartitionOptions o;
  const auto graph = randomChain(rng, 3);  // ChainProblem keeps references: not temporaries
  const auto cluster = twoLevelCluster(false, int64_t{1} << 40);
  const ChainProblem problem(graph, cluster, o);
  testing::expectError([&] { solveChainOnDevices(problem, {0, 2, 2}); }, {"at least one device"});
  testing::expectError([&] { solveChainOnDevices(problem, {0, 5}); }, {"device bounds"});
}

// A job whose ranks are already there (`train --nproc`): the plan occupies every device,
// the best such tiling, even where a plan on fewer devices would be faster by the DP's
// measure.
TEST(ChainPartition, OccupiesEveryDeviceWhenAsked) {
  std::mt19937 rng(11);
  int narrower = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const auto graph = randomChain(rng, 4 + trial % 6);
    const auto cluster = twoLevelCluster(trial % 2 == 1, int64_t{1} << 40);
    PartitionOptions o;
    o.microbatch_size = 2;
    o.microbatches = 4;
    o.max_replicas = trial % 3 == 0 ? 0 : 1;
    const Partition free = solveChain(ChainProblem(graph, cluster, o));
    narrower += free.stages.back().end_device < cluster.size();
    o.use_all_devices = true;
    const ChainProblem problem(graph, cluster, o);
    const Partition full = solveChain(problem);
    EXPECT_EQ(full.stages.back().end_device, cluster.size()) << "trial " << trial;
    std::vector<StageChoice> scratch;
    EXPECT_NEAR(full.objective, exhaustiveOptimum(problem, 0, 0, scratch), 1e-9) << "trial " << trial;
  }
  EXPECT_GT(narrower, 0) << "no trial where the free optimum leaves devices idle: the test shows nothing";
}

// The DP keeps the fewest replicas per busiest share (more would idle nothing faster),
// but that shortcut must not hide the only tilings of every device: one layer on 3
// devices with 4 micro-batches is 3 replicas (shares 2, 1, 1), although 2 replicas have
// the same busiest share.
TEST(ChainPartition, OccupiesEveryDeviceWithMoreReplicasThanTheShareNeeds) {
  std::mt19937 rng(5);
  PartitionOptions o;
  o.microbatches = 4;
  o.use_all_devices = true;
  const auto cluster = cluster::ClusterSpec::uniform(3, int64_t{1} << 40, 1e9, 0);
  const Partition p = solveChain(ChainProblem(randomChain(rng, 1), cluster, o));
  ASSERT_EQ(p.stages.size(), 1u);
  EXPECT_EQ(p.stages[0].replicas(), 3);
}

TEST(ChainPartition, SaysWhenNoPlanOccupiesEveryDevice) {
  std::mt19937 rng(3);
  PartitionOptions o;
  o.max_replicas = 1;
  o.use_all_devices = true;
  testing::expectError([&] { solveChain(ChainProblem(randomChain(rng, 3), twoLevelCluster(false, int64_t{1} << 40), o)); },
                       {"no partition occupies all 4 devices", "3 blocks", "at most 1 replicas"});
}

TEST(ChainPartition, ReplicasStayInsideANodeOrTakeWholeNodes) {
  const auto cluster = twoLevelCluster(false, 1 << 30);
  std::mt19937 rng(1);
  const auto graph = randomChain(rng, 4);
  const ChainProblem problem(graph, cluster, {});
  EXPECT_TRUE(problem.allowedDevices(0, 2));
  EXPECT_TRUE(problem.allowedDevices(0, 4));
  EXPECT_TRUE(problem.allowedDevices(1, 2));
  EXPECT_FALSE(problem.allowedDevices(1, 3));  // half of each node
  EXPECT_FALSE(problem.allowedDevices(1, 4));
}

TEST(ChainPartition, PlansValidateAndFitTheScheduleFootprint) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    const auto graph = randomChain(rng, 4 + trial % 9);
    const auto cluster = twoLevelCluster(trial % 2 == 1, 200000 + 40000 * (trial % 4));
    for (const std::string schedule : {"1f1b", "gpipe", "zb-h1", "2bw"}) {
      PartitionOptions o;
      o.schedule = schedule;
      o.microbatch_size = 2;
      o.microbatches = 4;
      plan::ScheduleOptions s;
      s.name = schedule;
      ChainPlan result;
      try {
        result = partitionChain(graph, cluster, o, s);
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("no partition fits memory"), std::string::npos) << e.what();
        continue;
      }
      ASSERT_NO_THROW(plan::validate(result.plan, graph, cluster));
      const auto report = sim::evaluatePlan(graph, cluster, result.plan, 2).report;
      for (const auto& rank : report.ranks)
        EXPECT_LE(rank.peak_memory_bytes, rank.memory_capacity_bytes)
            << schedule << " trial " << trial << " on " << rank.device;
    }
  }
}

TEST(ChainPartition, PrefersAPipelineWhenWeightsAreExpensiveToReduce) {
  // Two equal halves; data parallelism would all-reduce 1 GB over a slow network.
  auto graph = graph::LayerGraph::uniformChain(2, 1, 1, 1, 1000, int64_t{1} << 30);
  const auto cluster = cluster::ClusterSpec::uniform(2, int64_t{1} << 40, 1e8, 0);
  PartitionOptions o;
  o.microbatches = 4;
  auto p = partitionChain(graph, cluster, o, {}).plan;
  ASSERT_EQ(p.numStages(), 2);
  EXPECT_EQ(p.stages[0].devices.size(), 1u);

  // Weightless layers: the two devices replicate one stage instead (no boundary to pay).
  graph = graph::LayerGraph::uniformChain(2, 1, 1, 1, int64_t{1} << 30, 0);
  p = partitionChain(graph, cluster, o, {}).plan;
  ASSERT_EQ(p.numStages(), 1);
  EXPECT_EQ(p.stages[0].devices.size(), 2u);
}

TEST(ChainPartition, PricesTheAllReduceAtItsOwnRate) {
  // 1 GB of weights and 4 GB activations over 1 GB/s links: a pipeline pays 4 s per
  // message, more than a stage computes, data parallelism an all-reduce of 1 s that
  // overlaps the backward pass; data parallelism wins.
  const auto graph = graph::LayerGraph::uniformChain(2, 1, 1, 1, int64_t{4} << 30, int64_t{1} << 30);
  const std::vector<cluster::Device> two = {{"a", "cpu", 1.0, int64_t{1} << 40}, {"b", "cpu", 1.0, int64_t{1} << 40}};
  cluster::Level host{"host", 2, 1e9, 0.0};
  PartitionOptions o;
  o.microbatches = 4;
  EXPECT_EQ(partitionChain(graph, cluster::ClusterSpec(two, {host}, {}), o, {}).plan.numStages(), 1);
  // The same links, whose all-reduce moves 1e7 B/s (CPU hosts summing on their cores):
  // 100 s to reduce, and a pipeline wins, in the DP as in the simulator.
  host.allreduce_bandwidth = 1e7;
  const cluster::ClusterSpec slow_reduce(two, {host}, {});
  const plan::Plan chosen = partitionChain(graph, slow_reduce, o, {}).plan;
  ASSERT_EQ(chosen.numStages(), 2);
  plan::Plan replicated = chosen;
  replicated.stages = {{{"layer0", "layer1"}, {"a", "b"}}};
  EXPECT_LT(sim::evaluatePlan(graph, slow_reduce, chosen).report.iteration_time,
            sim::evaluatePlan(graph, slow_reduce, replicated).report.iteration_time);

  // Fast on the wire, but the hosts' CPUs move the all-reduce's traffic at 1e7 B/s:
  // 100 s of each replica's core that no backward pass hides.
  host.allreduce_bandwidth = 0;
  host.allreduce_host_bandwidth = 1e7;
  const cluster::ClusterSpec cpu_reduce(two, {host}, {});
  const plan::Plan on_cpus = partitionChain(graph, cpu_reduce, o, {}).plan;
  ASSERT_EQ(on_cpus.numStages(), 2);
  EXPECT_LT(sim::evaluatePlan(graph, cpu_reduce, on_cpus).report.iteration_time,
            sim::evaluatePlan(graph, cpu_reduce, replicated).report.iteration_time);

  // Activations of 1 kB now, and GPUs through host memory whose host links move 2e7 B/s:
  // each replica copies its 1 GB of gradients out and back (100 s), a pipeline's messages
  // next to nothing, and the pipeline wins, in the DP as in the simulator.
  const auto light = graph::LayerGraph::uniformChain(2, 1, 1, 1, 1000, int64_t{1} << 30);
  host.allreduce_host_bandwidth = std::numeric_limits<double>::infinity();
  host.through_host = true;
  std::vector<cluster::Device> gpus = two;
  for (auto& d : gpus) d.host_link_bandwidth = 2e7;
  const cluster::ClusterSpec copied(gpus, {host}, {}), unpriced(two, {host}, {});
  EXPECT_GT(sim::evaluatePlan(light, copied, replicated).report.iteration_time -
                sim::evaluatePlan(light, unpriced, replicated).report.iteration_time,
            2.0 * (int64_t{1} << 30) / 2e7 - 1e-6);
  const plan::Plan behind_links = partitionChain(light, copied, o, {}).plan;
  ASSERT_EQ(behind_links.numStages(), 2);
  EXPECT_LT(sim::evaluatePlan(light, copied, behind_links).report.iteration_time,
            sim::evaluatePlan(light, copied, replicated).report.iteration_time);
}

TEST(ChainPartition, LongChainsArePlannedOverBlocks) {
  const auto graph = graph::LayerGraph::uniformChain(1000, 1, 1, 1, 1000, 1000);
  const auto cluster = cluster::ClusterSpec::uniform(8, int64_t{1} << 40, 1e9, 0);
  PartitionOptions o;
  o.microbatches = 8;
  o.max_blocks = 100;
  const auto result = partitionChain(graph, cluster, o, {});
  EXPECT_NO_THROW(plan::validate(result.plan, graph, cluster));
  int layers = 0;
  for (const auto& s : result.plan.stages) layers += static_cast<int>(s.layers.size());
  EXPECT_EQ(layers, 1000);
}

TEST(ChainPartition, PlansADagOverItsTopologicalOrder) {
  // A diamond: a feeds b and c, both feed d. A cut after b carries a's and b's outputs.
  std::vector<graph::Layer> layers(4);
  const char* names[] = {"a", "b", "c", "d"};
  for (int i = 0; i < 4; ++i) {
    layers[i].name = names[i];
    layers[i].forward_seconds = layers[i].backward_input_seconds = 1;
    layers[i].output_bytes = 1000 * (i + 1);
  }
  layers[1].inputs = layers[2].inputs = {"a"};
  layers[3].inputs = {"b", "c"};
  const graph::LayerGraph graph(layers, 1);
  const auto cluster = cluster::ClusterSpec::uniform(2, int64_t{1} << 40, 1e6, 0);
  PartitionOptions o;
  o.microbatches = 2;
  o.max_replicas = 1;
  const ChainProblem problem(graph, cluster, o);
  EXPECT_DOUBLE_EQ(problem.boundarySeconds(2, 1), 2 * (1000 + 2000) / 1e6);
  const auto result = partitionChain(graph, cluster, o, {});
  EXPECT_EQ(result.plan.numStages(), 2);
  EXPECT_NO_THROW(plan::validate(result.plan, graph, cluster));
}

TEST(ChainPartition, RefusesWhatCannotFit) {
  const auto graph = graph::LayerGraph::uniformChain(3, 1, 1, 1, 10, 1000);
  const auto cluster = cluster::ClusterSpec::uniform(2, 100, 1e9, 0);
  testing::expectError([&] { partitionChain(graph, cluster, {}, {}); }, {"no partition fits memory"});
}

// Devices smaller than the process's own bytes (`train --rank-memory 16MiB`): the refusal
// gives the device's memory and the process's, never a negative size left for layers.
TEST(ChainPartition, SaysWhenTheProcessItselfTakesTheDevice) {
  auto graph = graph::LayerGraph::uniformChain(3, 1, 1, 1, 10, 1000);
  graph::ProcessMemory process;
  process.framework_bytes = 48 << 20;
  graph.setProcessMemory(process);
  const auto cluster = cluster::ClusterSpec::uniform(2, 16 << 20, 1e9, 0);
  try {
    partitionChain(graph, cluster, {}, {});
    FAIL() << "planned on devices the process fills";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("16.0 MiB is taken by the process itself (48.0 MiB)"), std::string::npos) << what;
    EXPECT_FALSE(std::regex_search(what, std::regex("-[0-9]"))) << what;
  }
}

TEST(ChainProblem, AllowedStartsAreExactlyTheAllowedBlocks) {
  // Three levels (4 per node, 4 nodes per rack, 2 racks) and none: the enumeration of
  // first devices equals trying every one.
  std::vector<cluster::Device> d;
  for (int i = 0; i < 32; ++i) d.push_back({"d" + std::to_string(i), "gpu", 1, int64_t{1} << 30});
  for (const auto& levels : std::vector<std::vector<cluster::Level>>{
           {{"node", 4, 1e10, 1e-6}, {"rack", 16, 1e9, 1e-5}, {"net", 32, 1e8, 1e-4}}, {}}) {
    std::vector<cluster::Link> links;
    if (levels.empty())
      for (int i = 0; i + 1 < 32; ++i) links.push_back({"d" + std::to_string(i), "d" + std::to_string(i + 1), 1e9, 0});
    const cluster::ClusterSpec cluster(d, levels, links);
    const auto graph = graph::LayerGraph::uniformChain(4, 1, 1, 1);
    PartitionOptions o;
    o.microbatches = 4;
    const ChainProblem problem(graph, cluster, o);
    for (int end = 1; end <= 32; ++end) {
      std::vector<int> brute;
      for (int d0 = end - 1; d0 >= 0; --d0)
        if (problem.allowedDevices(d0, end)) brute.push_back(d0);
      EXPECT_EQ(problem.allowedStarts(end), brute) << "end " << end << ", " << levels.size() << " levels";
    }
  }
}

}  // namespace
}  // namespace pipetrain::planner
