#include "pipetrain/planner/neighbours.h"

#include <gtest/gtest.h>

#include <set>

namespace pipetrain::planner {
namespace {

// Six layers on six devices of one ring.
struct Six {
  graph::LayerGraph graph = graph::LayerGraph::uniformChain(6, 1e-3, 1e-3, 1e-3, 4000, 1 << 20);
  cluster::ClusterSpec cluster{devices(), {{"ring", 6, 1e9, 1e-6}}, {}};
  static std::vector<cluster::Device> devices() {
    std::vector<cluster::Device> d;
    for (int i = 0; i < 6; ++i) d.push_back({"d" + std::to_string(i), "gpu", 1, 1 << 30});
    return d;
  }
  // Stages as (layers, devices) counts, consecutive from the first of each.
  plan::Plan chain(const std::vector<std::pair<int, int>>& stages, int microbatches = 4) const {
    plan::Plan p;
    p.microbatches = microbatches;
    int layer = 0, device = 0;
    for (auto [layers, devices] : stages) {
      plan::Stage s;
      for (int k = 0; k < layers; ++k) s.layers.push_back(graph.layer(layer++).name);
      for (int k = 0; k < devices; ++k) s.devices.push_back(cluster.device(device++).name);
      p.stages.push_back(s);
    }
    return p;
  }
  std::string shape(const plan::Plan& p) const {
    std::string s;
    for (const auto& st : p.stages) s += std::to_string(st.layers.size()) + "/" + std::to_string(st.devices.size()) + " ";
    return s;
  }
};

TEST(ChainNeighbours, AreOneStepAway) {
  const Six six;
  std::set<std::string> shapes;
  for (const plan::Plan& p : chainNeighbours(six.chain({{2, 2}, {3, 1}, {1, 1}}), six.graph, six.cluster))
    shapes.insert(six.shape(p));
  // clang-format off
  const std::set<std::string> expected{
      "1/2 4/1 1/1 ", "3/2 2/1 1/1 ", "2/2 2/1 2/1 ",  // a layer boundary moved by one (not emptying a stage)
      "4/2 1/1 1/1 ", "2/2 1/1 3/1 ",                  // or by two
      "1/2 3/1 2/1 ",                                  // the inner stage's layers shifted whole
      "3/2 1/1 2/1 ",                                  // the inner stage shrunk at both ends
      "2/1 3/2 1/1 ",                                  // a device boundary moved
      "2/2 3/1 1/2 ", "2/2 3/1 1/3 ",                  // the last stage takes one idle device, or two
      "2/2 4/2 ", "5/3 1/1 ",                          // two adjacent stages merged (3 replicas share 2, 1, 1)
      "1/1 1/1 3/1 1/1 ",                              // the replicated stage split; the last stage's one layer stays
  };
  // clang-format on
  EXPECT_EQ(shapes, expected);
  // PipeDream steps after every round of one micro-batch per replica: 3 cannot split 4.
  plan::Plan pipedream = six.chain({{2, 2}, {3, 1}, {1, 1}});
  pipedream.schedule.name = "pipedream";
  for (const plan::Plan& p : chainNeighbours(pipedream, six.graph, six.cluster))
    EXPECT_NE(six.shape(p), "5/3 1/1 ");
}

// Six layers, l0's output also read by l3 (a skip), 100 bytes each: the cuts before l2
// and l3 carry two tensors, the others one.
graph::LayerGraph skipChain() {
  std::vector<graph::Layer> v;
  for (int i = 0; i < 6; ++i) {
    graph::Layer l;
    l.name = "l" + std::to_string(i);
    l.forward_seconds = l.backward_input_seconds = l.backward_weight_seconds = 1e-3;
    l.output_bytes = 100;
    if (i > 0) l.inputs = {v.back().name};
    if (i == 3) l.inputs.push_back("l0");
    v.push_back(l);
  }
  return graph::LayerGraph(v, 1);
}

TEST(ChainNeighbours, CrossingBytesCountEveryTensorACutSplits) {
  EXPECT_EQ(crossingBytes(skipChain()), (std::vector<double>{0, 100, 200, 200, 100, 100, 0}));
}

// The boundary before l3 (two tensors) goes to the nearest cut of one either way: before
// l1, alone or with the next boundary moved back by as much work (two layers); before l4,
// where the next boundary cannot follow without emptying the last stage. The boundary
// before l5 has no cheaper cut inside its stages.
TEST(ChainNeighbours, MoveToTheNearestCheaperCut) {
  const graph::LayerGraph graph = skipChain();
  const Six six;
  plan::Plan p;
  p.microbatches = 4;
  for (auto [first, end] : {std::pair{0, 3}, {3, 5}, {5, 6}}) {
    plan::Stage s;
    for (int l = first; l < end; ++l) s.layers.push_back(graph.layer(l).name);
    s.devices = {six.cluster.device(static_cast<int>(p.stages.size())).name};
    p.stages.push_back(s);
  }
  const std::vector<double> crossing = crossingBytes(graph), work{0, 1, 2, 3, 4, 5, 6};
  const ChainCuts cuts{crossing, work};
  std::set<std::vector<int>> moved;
  for (const ChainRuns& r : cheaperCutRuns(p, {{0, 3, 5, 6}, {0, 1, 2, 3}}, six.cluster, cuts)) moved.insert(r.layer);
  EXPECT_EQ(moved, (std::set<std::vector<int>>{{0, 1, 5, 6}, {0, 1, 3, 6}, {0, 4, 5, 6}}));
}

TEST(ChainNeighbours, GrowTheLastStageOntoIdleDevices) {
  const Six six;
  std::set<std::string> shapes;
  for (const plan::Plan& p : chainNeighbours(six.chain({{6, 2}}), six.graph, six.cluster)) shapes.insert(six.shape(p));
  // One device more or fewer; the tail of the stage goes to one new device or two.
  EXPECT_TRUE(shapes.count("6/1 "));
  EXPECT_TRUE(shapes.count("6/3 "));  // 3 replicas take 2, 1 and 1 of the 4 micro-batches
  EXPECT_TRUE(shapes.count("3/1 3/1 "));
  EXPECT_TRUE(shapes.count("4/2 2/1 "));
  EXPECT_TRUE(shapes.count("4/2 2/2 "));
}

TEST(ChainNeighbours, NoneForPlansThatAreNotChains) {
  const Six six;
  plan::Plan reversed = six.chain({{3, 1}, {3, 1}});
  std::swap(reversed.stages[0].devices, reversed.stages[1].devices);  // the second stage on the first device
  EXPECT_TRUE(chainNeighbours(reversed, six.graph, six.cluster).empty());
  plan::Plan interleaved = six.chain({{3, 1}, {3, 1}});
  interleaved.schedule.chunks = 2;
  EXPECT_TRUE(chainNeighbours(interleaved, six.graph, six.cluster).empty());
}

TEST(ChainNeighbours, KeepReplicasToSchedulesThatReplicate) {
  const Six six;
  plan::Plan p = six.chain({{3, 1}, {3, 1}});
  p.schedule.name = "interleaved";  // not replicable
  p.schedule.chunks = 1;
  for (const plan::Plan& n : chainNeighbours(p, six.graph, six.cluster))
    for (const auto& s : n.stages) EXPECT_EQ(s.devices.size(), 1u) << six.shape(n);
  // Nor where the user asked for a pure pipeline (--no-replication).
  const plan::Plan two = six.chain({{3, 1}, {3, 1}});
  EXPECT_FALSE(chainNeighbours(two, six.graph, six.cluster).empty());
  for (const plan::Plan& n : chainNeighbours(two, six.graph, six.cluster, 1))
    for (const auto& s : n.stages) EXPECT_EQ(s.devices.size(), 1u) << six.shape(n);
}

}  // namespace
}  // namespace pipetrain::planner
