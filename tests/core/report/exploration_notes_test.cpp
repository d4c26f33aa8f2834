#include "pipetrain/report/exploration_table.h"

#include <gtest/gtest.h>

#include "pipetrain/planner/explore.h"

namespace pipetrain::report {
namespace {

bool anyNoteHas(const std::vector<std::string>& notes, const std::string& text) {
  for (const auto& n : notes)
    if (n.find(text) != std::string::npos) return true;
  return false;
}

// A batch of one sample on two ranks that must both train: the only plan is a pipeline of
// one micro-batch, idle most of the time; the notes say so and what would fill it.
TEST(ExplorationNotes, SayWhenTheBatchCannotFillThePipeline) {
  const auto graph = graph::LayerGraph::uniformChain(4, 1e-3, 1e-3, 1e-3, 4000, 1 << 20);
  const auto cluster = cluster::ClusterSpec::uniform(2, int64_t{1} << 30, 1e10, 1e-6);
  planner::ExploreOptions o;
  o.global_batch = 1;
  o.use_all_devices = true;
  const planner::Exploration e = planner::explore(graph, cluster, o);
  ASSERT_EQ(e.best().plan.numStages(), 2);
  const auto notes = explorationNotes(e);
  EXPECT_TRUE(anyNoteHas(notes, "makes 1 micro-batch(es) for 2 stages; a larger batch fills the pipeline"));

  o.global_batch = 16;  // enough micro-batches: no such note
  EXPECT_FALSE(anyNoteHas(explorationNotes(planner::explore(graph, cluster, o)), "fills the pipeline"));
}

}  // namespace
}  // namespace pipetrain::report
