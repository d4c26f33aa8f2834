#include "pipetrain/planner/profile_caveat.h"

#include <gtest/gtest.h>

namespace pipetrain::planner {
namespace {

cluster::ClusterSpec devices(const std::string& kind, int n) {
  std::vector<cluster::Device> d;
  for (int i = 0; i < n; ++i) d.push_back({"dev" + std::to_string(i), kind, 1.0, int64_t{1} << 30});
  return cluster::ClusterSpec(d, {{"host", n, 3e9, 5e-5}}, {});
}

TEST(ProfileCaveat, AWholeModelProfileOnSeveralThreadsIsFlaggedForSeveralCpuRanks) {
  graph::LayerGraph g = graph::LayerGraph::uniformChain(4, 1e-3, 1e-3, 1e-3);
  EXPECT_EQ(profileCaveat(g, devices("cpu", 2)), "");  // not recorded: nothing to say
  g.setProfiledAs({2, 1});
  const std::string note = profileCaveat(g, devices("cpu", 2));
  EXPECT_NE(note.find("2 threads"), std::string::npos) << note;
  EXPECT_NE(note.find("--share"), std::string::npos) << note;
  EXPECT_EQ(profileCaveat(g, devices("cpu", 1)), "");  // one rank has the cores it was profiled on
  EXPECT_EQ(profileCaveat(g, devices("gpu", 4)), "");
  g.setProfiledAs({1, 2});  // as train profiles: a share per rank, one thread each
  EXPECT_EQ(profileCaveat(g, devices("cpu", 2)), "");
}

}  // namespace
}  // namespace pipetrain::planner
