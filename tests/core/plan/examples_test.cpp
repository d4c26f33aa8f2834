// The files under examples/ load, validate and survive a round trip, so the docs and
// the demo never point at a broken example.
#include <gtest/gtest.h>

#include "pipetrain/plan/plan.h"

namespace pipetrain::plan {
namespace {

// The repository root, found from this file's own path (the build passes no data
// directory); __FILE__ is absolute under CMake and relative to the root otherwise.
std::string examplesDir() {
  const std::string self = __FILE__;
  const std::string tail = "tests/core/plan/examples_test.cpp";
  EXPECT_GE(self.size(), tail.size());
  return self.substr(0, self.size() - tail.size()) + "examples/";
}

TEST(Examples, TransformerValidates) {
  const std::string dir = examplesDir() + "transformer/";
  const auto graph = graph::LayerGraph::load(dir + "graph.json");
  const auto cluster = cluster::ClusterSpec::load(dir + "cluster.json");
  const Plan plan = Plan::load(dir + "plan.json");
  EXPECT_EQ(graph.size(), 12);
  EXPECT_TRUE(graph.isChain());
  EXPECT_EQ(cluster.size(), 4);
  EXPECT_EQ(plan.numStages(), 4);
  EXPECT_EQ(plan.microbatch_size, graph.batchSize());  // costs apply unscaled
  validate(plan, graph, cluster, dir + "plan.json");
  const StageGraph sg = stageGraph(plan, graph);
  EXPECT_EQ(sg.edge_bytes[0], std::vector<int64_t>{8 * 512 * 1024 * 4});

  EXPECT_EQ(graph::LayerGraph::fromJson(graph.toJson(), "again").toJson(), graph.toJson());
  EXPECT_EQ(cluster::ClusterSpec::fromJson(cluster.toJson(), "again").toJson(), cluster.toJson());
  EXPECT_EQ(Plan::fromJson(plan.toJson(), "again").toJson(), plan.toJson());
}

TEST(Examples, BranchyIsADagWithConvexAndNonConvexCuts) {
  const auto graph = graph::LayerGraph::load(examplesDir() + "branchy/graph.json");
  EXPECT_FALSE(graph.isChain());
  EXPECT_EQ(graph.successors(graph.indexOf("stem")).size(), 2u);
  EXPECT_EQ(graph.predecessors(graph.indexOf("merge")).size(), 2u);

  const auto cluster = cluster::ClusterSpec::uniform(4, int64_t{1} << 30, 10e9, 1e-5);
  Plan plan;
  plan.microbatch_size = 4;
  plan.microbatches = 4;
  plan.stages = {{{"stem"}, {"dev0"}},
                 {{"left1", "left2"}, {"dev1"}},
                 {{"right1", "right2"}, {"dev2"}},
                 {{"merge", "head"}, {"dev3"}}};
  validate(plan, graph, cluster, "branchy plan");
  const StageGraph sg = stageGraph(plan, graph);
  EXPECT_EQ(sg.succs[0], (std::vector<int>{1, 2}));
  EXPECT_EQ(sg.preds[3], (std::vector<int>{1, 2}));

  plan.stages = {{{"stem", "merge", "head"}, {"dev0"}}, {{"left1", "left2"}, {"dev1"}}, {{"right1", "right2"}, {"dev2"}}};
  EXPECT_THROW(validate(plan, graph, cluster, "branchy plan"), Error);
}

}  // namespace
}  // namespace pipetrain::plan
