// What a plan sends over each link per mini-batch: a pipeline's activations and gradients
// where it cuts, on the level its two stages' devices meet at, and a replicated stage's
// all-reduce on the slowest hop of its ring.
#include "pipetrain/sim/plan_traffic.h"

#include <gtest/gtest.h>

namespace pipetrain::sim {
namespace {

// Four layers, each handing on 1 MiB per micro-batch and holding 8 MiB of weights.
graph::LayerGraph fourLayers() {
  std::vector<graph::Layer> layers;
  for (int i = 0; i < 4; ++i) {
    graph::Layer l;
    l.name = "layer" + std::to_string(i);
    if (i > 0) l.inputs = {layers.back().name};
    l.forward_seconds = l.backward_input_seconds = l.backward_weight_seconds = 1e-3;
    l.output_bytes = l.saved_activation_bytes = 1 << 20;
    l.param_bytes = 8 << 20;
    layers.push_back(l);
  }
  return graph::LayerGraph(layers, 1);
}

// Two hosts of two devices: 10 GB/s within a host, 125 MB/s (1 Gb/s) between them.
cluster::ClusterSpec twoHosts() {
  std::vector<cluster::Device> devices;
  for (const char* name : {"a-0", "a-1", "b-0", "b-1"}) devices.push_back({name, "cpu", 1.0, int64_t{1} << 40});
  return cluster::ClusterSpec(devices, {{"host", 2, 10e9, 1e-5}, {"network", 4, 125e6, 1e-4}}, {});
}

plan::Plan twoStages(std::vector<std::string> first, std::vector<std::string> second, int microbatches) {
  plan::Plan p;
  p.microbatches = microbatches;
  p.stages = {{{"layer0", "layer1"}, std::move(first)}, {{"layer2", "layer3"}, std::move(second)}};
  return p;
}

TEST(ClusterSpec, NamesTheLevelTwoDevicesMeetAt) {
  const cluster::ClusterSpec c = twoHosts();
  EXPECT_EQ(c.routeName(0, 1), "host");
  EXPECT_EQ(c.routeName(1, 2), "network");
  EXPECT_EQ(c.routeName(3, 0), "network");
}

TEST(PlanTraffic, APipelineAcrossHostsSendsItsCutOverTheNetwork) {
  const graph::LayerGraph g = fourLayers();
  const cluster::ClusterSpec c = twoHosts();
  const plan::Plan p = twoStages({"a-0"}, {"b-0"}, 4);
  const std::vector<LinkTraffic> t = planTraffic(CostModel(g, c, p));
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].link, "network");
  EXPECT_EQ(t[0].what, "stages 0 -> 1");
  // 4 micro-batches, each an activation forward and its gradient back: 8 MiB.
  EXPECT_DOUBLE_EQ(t[0].bytes, 8.0 * (1 << 20));
  EXPECT_DOUBLE_EQ(t[0].wire_seconds, 8.0 * (1 << 20) / 125e6);
}

// A link of its own between the two hosts: the cut's activations one way and their
// gradients the other are one link's traffic, named once.
TEST(PlanTraffic, ALinkCarriesBothWaysUnderOneName) {
  const cluster::ClusterSpec hosts = twoHosts();
  const cluster::ClusterSpec c(hosts.devices(), hosts.levels(), {{"a-0", "b-0", 1e9, 1e-4}});
  const std::vector<LinkTraffic> t = planTraffic(CostModel(fourLayers(), c, twoStages({"a-0"}, {"b-0"}, 4)));
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].link, "link a-0 <-> b-0");
  EXPECT_DOUBLE_EQ(t[0].bytes, 8.0 * (1 << 20));
  EXPECT_EQ(c.routeName(2, 0), "link a-0 <-> b-0");
}

TEST(PlanTraffic, ReplicasOnOneHostAllReduceWithinIt) {
  const graph::LayerGraph g = fourLayers();
  const cluster::ClusterSpec c = twoHosts();
  const plan::Plan p = twoStages({"a-0", "a-1"}, {"b-0", "b-1"}, 4);
  const std::vector<LinkTraffic> t = planTraffic(CostModel(g, c, p));
  double network = 0;
  int allreduces = 0;
  for (const LinkTraffic& x : t) {
    if (x.what.find("all-reduce") != std::string::npos) {
      ++allreduces;
      EXPECT_EQ(x.link, "host") << x.what;
      // Each of 2 replicas sends half of the stage's 16 MiB of gradients twice.
      EXPECT_DOUBLE_EQ(x.bytes, 16.0 * (1 << 20));
    } else {
      EXPECT_EQ(x.link, "network") << x.what;
      network += x.bytes;
    }
  }
  EXPECT_EQ(allreduces, 2);
  EXPECT_DOUBLE_EQ(network, 8.0 * (1 << 20));
}

TEST(PlanTraffic, DataParallelismAcrossHostsAllReducesOverTheNetwork) {
  const graph::LayerGraph g = fourLayers();
  const cluster::ClusterSpec c = twoHosts();
  plan::Plan p;
  p.microbatches = 2;
  p.stages = {{{"layer0", "layer1", "layer2", "layer3"}, {"a-0", "b-0"}}};
  const std::vector<LinkTraffic> t = planTraffic(CostModel(g, c, p));
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].link, "network");
  EXPECT_DOUBLE_EQ(t[0].bytes, 32.0 * (1 << 20));
  EXPECT_DOUBLE_EQ(t[0].wire_seconds, 32.0 * (1 << 20) / 125e6);
}

TEST(PlanTraffic, OneRankSendsNothing) {
  const graph::LayerGraph g = fourLayers();
  plan::Plan p;
  p.stages = {{{"layer0", "layer1", "layer2", "layer3"}, {"a-0"}}};
  EXPECT_TRUE(planTraffic(CostModel(g, twoHosts(), p)).empty());
}

}  // namespace
}  // namespace pipetrain::sim
