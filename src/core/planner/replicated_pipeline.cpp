#include "pipetrain/planner/replicated_pipeline.h"

#include <string>

#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/util/error.h"

namespace pipetrain::planner {

plan::Plan replicatePipeline(const plan::Plan& pipeline, int copies, int width, const cluster::ClusterSpec& cluster) {
  if (copies < 1 || width < 1 || static_cast<int64_t>(copies) * width > cluster.size())
    throw Error(std::to_string(copies) + " copies of a pipeline on " + std::to_string(width) +
                " devices need more devices than the cluster's " + std::to_string(cluster.size()));
  if (schedule::multiStage(schedule::traits(pipeline.schedule.name)))
    throw Error("a pipeline under " + pipeline.schedule.name + " runs several stages per rank: it is not copied");
  plan::Plan copied = pipeline;
  copied.microbatches = pipeline.microbatches * copies;
  for (plan::Stage& stage : copied.stages) {
    std::vector<std::string> devices;
    for (const std::string& name : stage.devices) {
      const int d = cluster.indexOf(name);
      if (d < 0 || d >= width)
        throw Error("device '" + name + "' is not among the first " + std::to_string(width) +
                    " devices, the pipeline's block");
      for (int copy = 0; copy < copies; ++copy) devices.push_back(cluster.device(copy * width + d).name);
    }
    stage.devices = std::move(devices);
  }
  return copied;
}

std::optional<CopiedPipeline> copiedPipeline(const plan::Plan& plan, const cluster::ClusterSpec& cluster) {
  if (plan.stages.empty() || plan.stages[0].devices.size() < 2 ||
      schedule::multiStage(schedule::traits(plan.schedule.name)))
    return std::nullopt;
  // The first stage's first device in every copy, then its next device's: the copies are
  // the run of its devices a width apart.
  const std::vector<std::string>& first = plan.stages[0].devices;
  const int d0 = cluster.indexOf(first[0]), width = cluster.indexOf(first[1]) - d0;
  if (d0 < 0 || width < 1) return std::nullopt;
  int copies = 1;
  while (copies < static_cast<int>(first.size()) && cluster.indexOf(first[copies]) == d0 + copies * width) ++copies;
  if (copies < 2 || plan.microbatches % copies != 0) return std::nullopt;
  CopiedPipeline c{plan, copies, width};
  c.pipeline.microbatches = plan.microbatches / copies;
  for (plan::Stage& stage : c.pipeline.stages) {
    if (stage.devices.size() % copies != 0) return std::nullopt;
    std::vector<std::string> own;
    for (std::size_t d = 0; d < stage.devices.size(); d += copies) own.push_back(stage.devices[d]);
    stage.devices = std::move(own);
  }
  try {
    const plan::Plan again = replicatePipeline(c.pipeline, copies, width, cluster);
    for (std::size_t s = 0; s < plan.stages.size(); ++s)
      if (again.stages[s].devices != plan.stages[s].devices) return std::nullopt;
  } catch (const Error&) {
    return std::nullopt;  // a device beyond the first copy's block: not copies
  }
  return c;
}

}  // namespace pipetrain::planner
