// PipeDream's published layer profiles (bench/profiles) and its cluster's shape, shared by
// the benches that plan on them (planner_bench.cpp, planner_oracle.cpp).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "pipetrain/cluster/cluster_spec.h"

namespace pipetrain::bench {

// PipeDream's cluster shape (bench/profiles/pipedream-32gpus.json): servers of 8 GPUs
// at 60 GB/s, 3 GB/s between servers, memory that never binds.
inline cluster::ClusterSpec pipedreamCluster(int gpus) {
  std::vector<cluster::Device> d;
  for (int i = 0; i < gpus; ++i) d.push_back({"gpu" + std::to_string(i), "gpu", 1.0, int64_t{1} << 40});
  std::vector<cluster::Level> levels{{"server", std::min(8, gpus), 60e9, 0.0}};
  if (gpus > 8) levels.push_back({"cluster", gpus, 3e9, 0.0});
  return cluster::ClusterSpec(d, levels, {});
}

inline const std::vector<std::string> kPublished = {"alexnet", "vgg16", "gnmt", "resnet50", "inception-v3"};

// A published profile's path.
inline std::string publishedProfile(const std::string& model) {
  return std::string(PIPETRAIN_SOURCE_DIR) + "/bench/profiles/pipedream-" + model + ".json";
}

}  // namespace pipetrain::bench
