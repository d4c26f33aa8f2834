#include "auto_plan.h"

#include <unistd.h>

#include <cstdio>

#include "launcher.h"
#include "plan_table.h"
#include "prediction.h"
#include "pipetrain/planner/explore.h"

namespace pipetrain::cli {

void planLocalRun(const runtime::TrainConfig& config, const AutoPlanRequest& request) {
  // `pipetrain profile` in a child with a rank's thread settings: this process's BLAS
  // already runs on every core, and times measured so would not be the ranks' times.
  const std::string graph_path = request.out + ".profile.json";
  std::vector<std::string> profile{"pipetrain", "profile", "--model", config.model,
                                   "--batch", std::to_string(config.microbatch_size),
                                   "--optimizer", config.optimizer, "--warmup", "1", "--repeats", "3",
                                   "--out", graph_path};
  for (const auto& o : request.model_options) profile.insert(profile.end(), {"--model-option", o});
  std::printf("profiling %s at micro-batch %lld with %d BLAS thread(s), as each rank runs:\n", config.model.c_str(),
              static_cast<long long>(config.microbatch_size), request.blas_threads);
  std::fflush(stdout);
  runLikeARank(profile, request.blas_threads);
  const graph::LayerGraph graph = graph::LayerGraph::load(graph_path);

  const int64_t memory = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE) / request.ranks;
  planner::ExploreOptions o;
  o.global_batch = config.microbatch_size * config.microbatches;
  o.microbatch_sizes = {config.microbatch_size};
  o.schedule = request.choose_schedule ? "auto" : config.schedule;
  o.max_replicas = request.allow_replication ? 0 : 1;
  o.use_all_devices = true;
  const planner::Exploration e = planner::explore(graph, localCluster(request.ranks, memory), o);
  std::printf("planned for %d local ranks:\n", request.ranks);
  printExploration(e, 5);
  json_io::writeFile(request.out, e.best().plan.toJson());
  std::printf("plan: %s (profile: %s)\n", request.out.c_str(), graph_path.c_str());
  std::fflush(stdout);
}

}  // namespace pipetrain::cli
