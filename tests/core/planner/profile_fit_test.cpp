#include "pipetrain/planner/profile_fit.h"

#include <gtest/gtest.h>

namespace pipetrain::planner {
namespace {

cluster::ClusterSpec devices(const std::string& kind, int n, int threads = 0) {
  std::vector<cluster::Device> d;
  for (int i = 0; i < n; ++i) {
    d.push_back({"dev" + std::to_string(i), kind, 1.0, int64_t{1} << 30});
    d.back().threads = threads;
  }
  return cluster::ClusterSpec(d, {{"host", n, 3e9, 5e-5}}, {});
}

graph::LayerGraph profiledOn(int threads, int shares, double speedup = 0) {
  graph::LayerGraph g = graph::LayerGraph::uniformChain(4, 1e-3, 1e-3, 1e-3);
  g.setProfiledAs({threads, shares, 0.0, speedup});
  return g;
}

TEST(ThreadTimeFactor, PassesThroughTheProfiledThreadsAndOneThread) {
  EXPECT_DOUBLE_EQ(threadTimeFactor(2, 1.9, 2), 1.0);
  EXPECT_DOUBLE_EQ(threadTimeFactor(2, 1.9, 1), 1.9);
  EXPECT_DOUBLE_EQ(threadTimeFactor(8, 8.0, 2), 4.0);    // all of the step divides
  EXPECT_DOUBLE_EQ(threadTimeFactor(8, 1.0, 2), 1.0);    // none of it does
  EXPECT_NEAR(threadTimeFactor(4, 2.5, 2), 1.5, 1e-12);  // a fifth serial: (0.2 + 0.8 / 2) x 2.5
  // On one thread the measurement stands, whatever the law makes of it; between, the law
  // takes the speed-up within what it can describe.
  EXPECT_DOUBLE_EQ(threadTimeFactor(2, 3.0, 1), 3.0);
  EXPECT_DOUBLE_EQ(threadTimeFactor(2, 0.5, 1), 0.5);    // slower on more threads (nested pools)
  EXPECT_DOUBLE_EQ(threadTimeFactor(4, 6.0, 2), 2.0);    // taken as all divided: 4 / 2
  EXPECT_DOUBLE_EQ(threadTimeFactor(4, 0.5, 2), 1.0);    // taken as none divided
  EXPECT_DOUBLE_EQ(threadTimeFactor(1, 0.0, 4), 1.0);    // one thread says nothing of more
}

TEST(ProfileFit, CpuDevicesOnFewerThreadsArePricedAtTheProfilesMeasuredSpeedup) {
  const ProfileFit fit = fitProfileToCluster(profiledOn(2, 1, 1.9), devices("cpu", 2, 1));
  ASSERT_EQ(fit.cluster.size(), 2);
  for (const cluster::Device& d : fit.cluster.devices()) EXPECT_DOUBLE_EQ(d.speed, 1 / 1.9);
  EXPECT_NE(fit.note.find("1.90x"), std::string::npos) << fit.note;
  EXPECT_NE(fit.note.find("2 CPU devices on 1 thread"), std::string::npos) << fit.note;
  // The devices' links and sharing are the cluster's own.
  EXPECT_EQ(fit.cluster.levels().size(), 1u);
  EXPECT_DOUBLE_EQ(fit.cluster.route(0, 1).bandwidth, 3e9);
}

TEST(ProfileFit, DevicesOnTheProfilesThreadsAndOtherKindsKeepTheirSpeed) {
  for (const auto& c : {devices("cpu", 2, 2), devices("gpu", 2, 1), devices("cpu", 1)}) {
    const ProfileFit fit = fitProfileToCluster(profiledOn(2, 1, 1.9), c);
    for (const cluster::Device& d : fit.cluster.devices()) EXPECT_DOUBLE_EQ(d.speed, 1.0);
    EXPECT_EQ(fit.note, "");
  }
}

TEST(ProfileFit, WhatCannotBeBroughtIsPricedAsProfiledAndSaidSo) {
  // No speed-up measured (a profile as ranks run, or an older one).
  ProfileFit fit = fitProfileToCluster(profiledOn(4, 2), devices("cpu", 2, 1));
  EXPECT_DOUBLE_EQ(fit.cluster.device(0).speed, 1.0);
  EXPECT_NE(fit.note.find("likely too fast"), std::string::npos) << fit.note;
  EXPECT_NE(fit.note.find("1 (2 devices)"), std::string::npos) << fit.note;
  // More threads than profiled: the law is not extrapolated.
  fit = fitProfileToCluster(profiledOn(1, 2), devices("cpu", 2, 4));
  EXPECT_DOUBLE_EQ(fit.cluster.device(0).speed, 1.0);
  EXPECT_NE(fit.note.find("likely too slow"), std::string::npos) << fit.note;
}

TEST(ProfileFit, AWholeModelProfileOnSeveralThreadsIsFlaggedForCpuDevicesThatDoNotSayTheirThreads) {
  EXPECT_EQ(fitProfileToCluster(graph::LayerGraph::uniformChain(4, 1e-3, 1e-3, 1e-3), devices("cpu", 2)).note,
            "");  // not recorded: nothing to say
  const std::string note = fitProfileToCluster(profiledOn(2, 1, 1.9), devices("cpu", 2)).note;
  EXPECT_NE(note.find("2 threads"), std::string::npos) << note;
  EXPECT_NE(note.find("\"threads\""), std::string::npos) << note;
  EXPECT_NE(note.find("--share"), std::string::npos) << note;
  EXPECT_EQ(fitProfileToCluster(profiledOn(2, 1), devices("gpu", 4)).note, "");
  EXPECT_EQ(fitProfileToCluster(profiledOn(1, 2), devices("cpu", 2)).note, "");  // as train profiles
}

}  // namespace
}  // namespace pipetrain::planner
