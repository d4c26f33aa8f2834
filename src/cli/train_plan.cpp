#include "train_plan.h"

#include <limits>
#include <set>

#include "pipetrain/plan/plan.h"
#include "pipetrain/util/error.h"

namespace pipetrain::cli {

void applyPlan(const std::string& path, int world_size, runtime::TrainConfig& config) {
  const plan::Plan p = plan::Plan::load(path);
  const models::Model model = models::buildModel(config.model, config.model_config, config.seed);
  const graph::LayerGraph graph = model.layerGraph();

  // The plan's devices are the ranks; memory is the runtime's to report, not to check here.
  std::vector<cluster::Device> devices;
  std::set<std::string> seen;
  for (const auto& stage : p.stages)
    for (const auto& d : stage.devices)
      if (seen.insert(d).second) devices.push_back({d, "cpu", 1.0, std::numeric_limits<int64_t>::max()});
  if (static_cast<int>(devices.size()) != world_size)
    throw Error(path + ": the plan uses " + std::to_string(devices.size()) + " devices, but the job has " +
                std::to_string(world_size) + " ranks (--nproc or WORLD_SIZE)");
  const cluster::ClusterSpec cluster(devices, {{"network", static_cast<int>(devices.size()),
                                                std::numeric_limits<double>::infinity(), 0.0}},
                                     {}, path);
  plan::validate(p, graph, cluster, path);

  std::vector<int> bounds{0};
  config.stage_replicas.clear();
  for (int s = 0; s < p.numStages(); ++s) {
    const auto& stage = p.stages[s];
    if (p.schedule.name != "interleaved") config.stage_replicas.push_back(static_cast<int>(stage.devices.size()));
    for (std::size_t i = 0; i < stage.layers.size(); ++i)
      if (graph.indexOf(stage.layers[i]) != bounds.back() + static_cast<int>(i))
        throw Error(path + ": stage " + std::to_string(s) + " must be the next run of model '" + config.model +
                    "' layers in order; layer '" + stage.layers[i] + "' is out of place");
    bounds.push_back(bounds.back() + static_cast<int>(stage.layers.size()));
  }
  config.stage_bounds = bounds;
  config.schedule = p.schedule.name;
  config.chunks = p.schedule.chunks;
  config.microbatches = p.microbatches;
  config.microbatch_size = p.microbatch_size;
}

}  // namespace pipetrain::cli
