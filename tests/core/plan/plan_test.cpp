// Plan: JSON form, the stage DAG, and every message validate() can give.
#include "pipetrain/plan/plan.h"

#include <gtest/gtest.h>

#include "pipetrain/plan/plan_program.h"

#include "../expect_error.h"

namespace pipetrain::plan {
namespace {

using json_io::Json;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

using testing::expectError;

// A graph from (name, inputs) pairs; every layer outputs `bytes`.
graph::LayerGraph dag(const std::vector<std::pair<std::string, std::vector<std::string>>>& spec,
                      int64_t bytes = 10) {
  std::vector<graph::Layer> layers;
  for (const auto& [name, inputs] : spec) {
    graph::Layer l;
    l.name = name;
    l.inputs = inputs;
    l.output_bytes = bytes;
    layers.push_back(l);
  }
  return graph::LayerGraph(layers, 1);
}

// One stage per layer group, stage s on device "dev{s}".
Plan planOf(const std::vector<std::vector<std::string>>& groups) {
  Plan p;
  p.microbatches = 4;
  for (std::size_t s = 0; s < groups.size(); ++s) p.stages.push_back({groups[s], {"dev" + std::to_string(s)}});
  return p;
}

const cluster::ClusterSpec& bigCluster() {
  static const cluster::ClusterSpec c = cluster::ClusterSpec::uniform(8, 64 * kGiB, 1e9, 1e-6);
  return c;
}

Json planJson() {
  return Json::parse(R"({
    "format": "pipetrain.plan", "version": 1, "microbatch_size": 2, "microbatches": 8,
    "schedule": {"name": "pipedream", "vertical_sync": true},
    "stages": [{"layers": ["layer0", "layer1"], "devices": ["dev0", "dev1"]},
               {"layers": ["layer2"], "devices": ["dev2"]}]
  })");
}

TEST(Plan, ReadsAndRoundTrips) {
  const Plan p = Plan::fromJson(planJson(), "plan.json");
  EXPECT_EQ(p.numStages(), 2);
  EXPECT_EQ(p.samplesPerMinibatch(), 16);
  EXPECT_EQ(p.schedule.name, "pipedream");
  EXPECT_EQ(p.schedule.chunks, 1);
  EXPECT_TRUE(p.schedule.vertical_sync);
  EXPECT_TRUE(p.schedule.pipemare_correction);
  EXPECT_EQ(p.stages[0].devices, (std::vector<std::string>{"dev0", "dev1"}));
  const Json written = p.toJson();
  EXPECT_EQ(Plan::fromJson(written, "written").toJson(), written);
  validate(p, graph::LayerGraph::uniformChain(3, 1, 1, 1), bigCluster(), "plan.json");
}

TEST(Plan, ScheduleMayBeAPlainName) {
  Json j = planJson();
  j["schedule"] = "gpipe";
  const Plan p = Plan::fromJson(j, "plan.json");
  EXPECT_EQ(p.schedule.name, "gpipe");
  EXPECT_FALSE(p.schedule.vertical_sync);
}

TEST(Plan, RejectsWrongHeaderAndTypos) {
  Json j = planJson();
  j["version"] = 0;
  expectError([&] { Plan::fromJson(j, "plan.json"); }, {"plan.json", "version 0"});
  j = planJson();
  j["format"] = "pipetrain.cluster";
  expectError([&] { Plan::fromJson(j, "plan.json"); }, {"plan.json", "pipetrain.plan"});
  j = planJson();
  j["stages"][1]["layerz"] = j["stages"][1]["layers"];
  expectError([&] { Plan::fromJson(j, "plan.json"); }, {"plan.json", "stages[1]", "layerz"});
  j = planJson();
  j["schedule"]["chunk"] = 2;
  expectError([&] { Plan::fromJson(j, "plan.json"); }, {"plan.json", "schedule", "chunk"});
  j = planJson();
  j.erase("microbatches");
  expectError([&] { Plan::fromJson(j, "plan.json"); }, {"plan.json", "microbatches"});
}

TEST(StageGraph, ChainEdgesCarryTheProducersOutput) {
  const auto g = graph::LayerGraph::uniformChain(4, 1, 1, 1, 100);
  const StageGraph sg = stageGraph(planOf({{"layer0", "layer1"}, {"layer2", "layer3"}}), g);
  EXPECT_EQ(sg.succs[0], std::vector<int>{1});
  EXPECT_EQ(sg.preds[1], std::vector<int>{0});
  EXPECT_EQ(sg.edge_bytes[0], std::vector<int64_t>{100});
  EXPECT_TRUE(sg.succs[1].empty());
}

TEST(StageGraph, CountsEachProducerOncePerConsumerStage) {
  // in feeds l and r; both branches merge in join.
  const auto g = dag({{"in", {}}, {"l", {"in"}}, {"r", {"in"}}, {"join", {"l", "r"}}}, 7);
  const StageGraph both = stageGraph(planOf({{"in"}, {"l", "r"}, {"join"}}), g);
  EXPECT_EQ(both.edge_bytes[0], std::vector<int64_t>{7});    // in -> {l, r}: once
  EXPECT_EQ(both.edge_bytes[1], std::vector<int64_t>{14});   // l and r are two producers
  const StageGraph split = stageGraph(planOf({{"in"}, {"l"}, {"r"}, {"join"}}), g);
  EXPECT_EQ(split.succs[0], (std::vector<int>{1, 2}));
  EXPECT_EQ(split.edge_bytes[0], (std::vector<int64_t>{7, 7}));
  EXPECT_EQ(split.preds[3], (std::vector<int>{1, 2}));
}

TEST(Validate, LayerAssignment) {
  const auto g = graph::LayerGraph::uniformChain(4, 1, 1, 1);
  const auto& c = bigCluster();
  expectError([&] { validate(planOf({{"layer0"}, {"layer1"}, {"layer2"}, {"layer3", "fc9"}}), g, c, "plan.json"); },
              {"plan.json: stage 3 lists layer 'fc9' which the model does not have"});
  expectError([&] { validate(planOf({{"layer0", "layer1"}, {"layer2"}}), g, c, "plan.json"); },
              {"plan.json: layer 'layer3' is in no stage"});
  expectError([&] { validate(planOf({{"layer0"}, {"layer1"}}), g, c, "plan.json"); },
              {"layer 'layer2' is in no stage", "1 more"});
  expectError([&] { validate(planOf({{"layer0", "layer1"}, {"layer2", "layer3", "layer1"}}), g, c, "plan.json"); },
              {"plan.json: layer 'layer1' is in stage 0 and stage 1"});
  expectError([&] { validate(planOf({{"layer0", "layer1", "layer2"}, {"layer3", "layer3"}}), g, c, "plan.json"); },
              {"plan.json", "stage 1", "'layer3'", "twice"});
  expectError([&] { validate(planOf({{"layer0", "layer1", "layer2", "layer3"}, {}}), g, c, "plan.json"); },
              {"plan.json: stage 1 has no layers"});
  expectError([&] { validate(Plan{}, g, c, "plan.json"); }, {"plan.json", "no stages"});
}

TEST(Validate, Devices) {
  const auto g = graph::LayerGraph::uniformChain(3, 1, 1, 1);
  const auto& c = bigCluster();
  Plan p = planOf({{"layer0"}, {"layer1"}, {"layer2"}});
  p.stages[1].devices = {"gpu3"};
  expectError([&] { validate(p, g, c, "plan.json"); },
              {"plan.json: stage 1 lists device 'gpu3' which the cluster does not have"});
  p.stages[1].devices = {};
  expectError([&] { validate(p, g, c, "plan.json"); }, {"plan.json: stage 1 has no devices"});
  p.stages[1].devices = {"dev5", "dev0"};
  expectError([&] { validate(p, g, c, "plan.json"); }, {"plan.json: device 'dev0' is used by stage 0 and stage 1"});
  p.stages[1].devices = {"dev5", "dev5"};
  expectError([&] { validate(p, g, c, "plan.json"); }, {"plan.json", "stage 1", "'dev5'", "twice"});
  p.stages[1].devices = {"dev5", "dev6"};  // replicas are fine
  validate(p, g, c, "plan.json");
}

TEST(Validate, MicrobatchNumbersAndChunks) {
  const auto g = graph::LayerGraph::uniformChain(2, 1, 1, 1);
  Plan p = planOf({{"layer0"}, {"layer1"}});
  p.microbatches = 0;
  expectError([&] { validate(p, g, bigCluster(), "plan.json"); }, {"plan.json", "microbatches", "at least 1"});
  p.microbatches = 2;
  p.microbatch_size = 0;
  expectError([&] { validate(p, g, bigCluster(), "plan.json"); }, {"plan.json", "microbatch_size", "at least 1"});
  p.microbatch_size = 1;
  p.schedule.chunks = 2;
  expectError([&] { validate(p, g, bigCluster(), "plan.json"); }, {"plan.json", "chunks", "interleaved", "1f1b"});
}

TEST(Validate, ConvexStagesOfADag) {
  // in -> {a1 -> a2, b1 -> b2} -> join: branches may be split or kept together...
  const auto g = dag({{"in", {}},
                      {"a1", {"in"}},
                      {"a2", {"a1"}},
                      {"b1", {"in"}},
                      {"b2", {"b1"}},
                      {"join", {"a2", "b2"}}});
  const auto& c = bigCluster();
  validate(planOf({{"in"}, {"a1", "a2"}, {"b1", "b2"}, {"join"}}), g, c, "plan.json");
  validate(planOf({{"in", "a1", "b1"}, {"a2", "b2", "join"}}), g, c, "plan.json");
  // ...but a stage may not hold both ends of a path without its middle.
  expectError([&] { validate(planOf({{"in", "join"}, {"a1", "a2"}, {"b1", "b2"}}), g, c, "plan.json"); },
              {"plan.json: stage 0 is not convex: layer 'in' (stage 0) reaches layer 'join' (stage 0) through layer "});
  const auto chain = graph::LayerGraph::uniformChain(3, 1, 1, 1);
  expectError([&] { validate(planOf({{"layer0", "layer2"}, {"layer1"}}), chain, c, "plan.json"); },
              {"plan.json: stage 0 is not convex: layer 'layer0' (stage 0) reaches layer 'layer2' (stage 0) "
               "through layer 'layer1' (stage 1)"});
}

TEST(Validate, StagesMustNotFeedEachOtherInACycle) {
  // a -> d and b -> c: stages {a, c} and {b, d} are each convex, yet feed each other.
  const auto g = dag({{"a", {}}, {"b", {}}, {"c", {"b"}}, {"d", {"a"}}});
  expectError([&] { validate(planOf({{"a", "c"}, {"b", "d"}}), g, bigCluster(), "plan.json"); },
              {"plan.json: the stages form a cycle: stage 0 -> stage 1 -> stage 0"});
}

TEST(Validate, InterleavedLayout) {
  const auto g = graph::LayerGraph::uniformChain(6, 1, 1, 1);
  const auto& c = bigCluster();
  Plan p = planOf({{"layer0"}, {"layer1"}, {"layer2"}, {"layer3"}, {"layer4"}, {"layer5"}});
  p.schedule.name = "interleaved";
  p.schedule.chunks = 2;
  for (int s = 0; s < 6; ++s) p.stages[s].devices = {"dev" + std::to_string(s % 3)};
  validate(p, g, c, "plan.json");

  Plan wrong = p;
  wrong.stages[4].devices = {"dev2"};
  expectError([&] { validate(wrong, g, c, "plan.json"); },
              {"plan.json", "interleaved", "stage s mod p", "stage 4", "'dev2'", "stage 1", "'dev1'"});
  wrong = p;
  wrong.stages[1].devices = {"dev0"};
  wrong.stages[4].devices = {"dev0"};
  expectError([&] { validate(wrong, g, c, "plan.json"); }, {"plan.json", "interleaved", "stage 0", "stage 1", "'dev0'"});
  wrong = p;
  wrong.stages[2].devices = {"dev2", "dev7"};
  expectError([&] { validate(wrong, g, c, "plan.json"); }, {"plan.json", "interleaved", "stage 2", "2 devices"});
  wrong = p;
  wrong.schedule.chunks = 4;
  expectError([&] { validate(wrong, g, c, "plan.json"); }, {"plan.json", "interleaved", "6 stages"});
}

TEST(Validate, VLayout) {
  // zb-v and dualpipev: device r runs stages r and 2p-1-r.
  const auto g = graph::LayerGraph::uniformChain(6, 1, 1, 1);
  const auto& c = bigCluster();
  Plan p = planOf({{"layer0"}, {"layer1"}, {"layer2"}, {"layer3"}, {"layer4"}, {"layer5"}});
  p.schedule.name = "zb-v";
  for (int s = 0; s < 6; ++s) p.stages[s].devices = {"dev" + std::to_string(s < 3 ? s : 5 - s)};
  validate(p, g, c, "plan.json");
  EXPECT_EQ(rankDeviceNames(p), (std::vector<std::string>{"dev0", "dev1", "dev2"}));

  Plan wrong = p;
  wrong.stages[4].devices = {"dev2"};  // the looped layout, not the V
  expectError([&] { validate(wrong, g, c, "plan.json"); },
              {"plan.json", "zb-v", "stage 2p-1-s", "stage 4", "'dev2'", "stage 1", "'dev1'"});
  wrong = p;
  wrong.schedule.chunks = 2;
  expectError([&] { validate(wrong, g, c, "plan.json"); }, {"plan.json", "chunks", "interleaved"});
}

TEST(Validate, MemoryEstimateAndGivenFigures) {
  // Per stage: weights + gradients 2 MiB, Adam state 2 MiB, activations 1 MiB per sample,
  // and on a CPU the heap's share beside them (glibc's, graph::kGlibcKeptShare, 0.4).
  const auto g = graph::LayerGraph::uniformChain(2, 1, 1, 1, kMiB, kMiB);
  const cluster::ClusterSpec small = cluster::ClusterSpec::uniform(2, 8 * kMiB, 1e9, 0);
  Plan p = planOf({{"layer0"}, {"layer1"}});
  validate(p, g, small, "plan.json");  // 5 MiB each, 7 with the heap's share
  p.microbatch_size = 3;                // activations scale with the micro-batch: 7 MiB, 9.8
  expectError([&] { validate(p, g, small, "plan.json"); },
              {"plan.json: stage 0 needs 9.8 MiB on device 'dev0' which has 8.0 MiB"});

  const cluster::ClusterSpec fpgas({{"fpga0", "fpga", 1, 4 * kGiB}, {"fpga1", "fpga", 1, 4 * kGiB},
                                    {"fpga2", "fpga", 1, 4 * kGiB}},
                                   {{"board", 3, 1e9, 0}}, {});
  Plan q = planOf({{"layer0"}, {"layer1"}});
  q.stages[0].devices = {"fpga0"};
  q.stages[1].devices = {"fpga1", "fpga2"};
  const int64_t big = static_cast<int64_t>(12.3 * kGiB);
  validate(q, g, fpgas, "plan.json", {kGiB, kGiB});
  expectError([&] { validate(q, g, fpgas, "plan.json", {kGiB, big}); },
              {"plan.json: stage 1 needs 12.3 GiB on device 'fpga1' which has 4.0 GiB"});
  expectError([&] { validate(q, g, fpgas, "plan.json", {kGiB}); }, {"plan.json", "1 per-stage", "2 stages"});
}

TEST(Validate, InterleavedStagesShareTheirDevicesMemory) {
  const auto g = graph::LayerGraph::uniformChain(4, 1, 1, 1);
  const cluster::ClusterSpec c = cluster::ClusterSpec::uniform(2, 16 * kMiB, 1e9, 0);
  Plan p = planOf({{"layer0"}, {"layer1"}, {"layer2"}, {"layer3"}});
  p.schedule.name = "interleaved";
  p.schedule.chunks = 2;
  for (int s = 0; s < 4; ++s) p.stages[s].devices = {"dev" + std::to_string(s % 2)};
  validate(p, g, c, "plan.json", {6 * kMiB, 4 * kMiB, 4 * kMiB, 4 * kMiB});  // 10 MiB and the heap's 4
  expectError([&] { validate(p, g, c, "plan.json", {6 * kMiB, 4 * kMiB, 6 * kMiB, 4 * kMiB}); },
              {"plan.json: stages 0 and 2 need together 16.8 MiB on device 'dev0' which has 16.0 MiB"});
}

TEST(Validate, CommunicatingDevicesNeedARoute) {
  const auto g = graph::LayerGraph::uniformChain(2, 1, 1, 1);
  const cluster::ClusterSpec islands({{"dev0", "fpga", 1, kGiB}, {"dev1", "fpga", 1, kGiB}}, {}, {});
  expectError([&] { validate(planOf({{"layer0"}, {"layer1"}}), g, islands, "plan.json"); },
              {"plan.json", "stage 0 feeds stage 1", "'dev0'", "'dev1'"});
  const cluster::ClusterSpec linked({{"dev0", "fpga", 1, kGiB}, {"dev1", "fpga", 1, kGiB}}, {},
                                    {{"dev0", "dev1", 1e9, 0}});
  validate(planOf({{"layer0"}, {"layer1"}}), g, linked, "plan.json");
}

}  // namespace
}  // namespace pipetrain::plan
