#include "auto_plan.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "launcher.h"
#include "plan_table.h"
#include "prediction.h"
#include "report_pages.h"
#include "pipetrain/planner/explore.h"
#include "pipetrain/util/error.h"

namespace pipetrain::cli {
namespace {

// The layer times averaged over the profiles `path`, `path.1`, ... (sizes agree), which
// are then removed but the first, rewritten with the means.
graph::LayerGraph meanProfile(const std::string& path, int count) {
  const graph::LayerGraph first = graph::LayerGraph::load(path);
  std::vector<graph::Layer> layers = first.layers();
  for (int r = 1; r < count; ++r) {
    const std::string other = path + "." + std::to_string(r);
    const graph::LayerGraph g = graph::LayerGraph::load(other);
    for (std::size_t l = 0; l < layers.size(); ++l) {
      layers[l].forward_seconds += g.layer(l).forward_seconds;
      layers[l].backward_input_seconds += g.layer(l).backward_input_seconds;
      layers[l].backward_weight_seconds += g.layer(l).backward_weight_seconds;
      layers[l].optimizer_seconds += g.layer(l).optimizer_seconds;
    }
    std::remove(other.c_str());
  }
  for (auto& l : layers) {
    l.forward_seconds /= count;
    l.backward_input_seconds /= count;
    l.backward_weight_seconds /= count;
    l.optimizer_seconds /= count;
  }
  graph::LayerGraph mean(layers, first.batchSize(), path);
  json_io::writeFile(path, mean.toJson());
  return mean;
}

}  // namespace

std::string profilePath(const std::string& plan_path) { return plan_path + ".profile.json"; }

LocalPlan planLocalRun(const runtime::TrainConfig& config, const AutoPlanRequest& request) {
  const int layers = static_cast<int>(runtime::openModel(config).layers.size());
  if (!request.allow_replication && request.ranks > layers)
    throw Error("--no-replication: model '" + config.model + "' has " + std::to_string(layers) +
                " layers, too few for a pipeline over " + std::to_string(request.ranks) +
                " ranks; use fewer ranks (--nproc) or allow replicated stages");
  // `pipetrain profile` as the ranks will run: one process per rank with a rank's thread
  // settings, all at once, so that ranks sharing caches and memory share them while
  // profiled too. (Timed one layer at a time, a layer ran up to 1.5x faster alone than
  // beside another rank; in passes over the model, as now, two ranks' profiles matched
  // one profiled alone on this 2-core machine: docs/profiling.md.) With more ranks than
  // the cores run at once, only as many profile as run at once: the profile is then a
  // core's speed, and the cluster says that the ranks share the cores (time-slicing left
  // in the profile would be counted twice; and it lands unevenly: of three profiles on
  // two cores, one took 1.7x as long as the other two, which ran as fast as alone).
  // Three warm-up runs per layer at least, then more until the heap has settled
  // (profile_model.cpp, NOTE(settling)).
  const int concurrent = std::max(1, request.cores / request.blas_threads);
  const int profilers = std::min(request.ranks, concurrent);
  const std::string graph_path = profilePath(request.out);
  // With --batch the planner chooses the micro-batch size too; costs scale linearly from
  // the profiled batch, taken at the largest power of two dividing it, up to 32.
  const int64_t global_batch =
      request.args.batch > 0 ? request.args.batch : request.args.microbatch_size * request.args.microbatches;
  int64_t profiled = request.args.microbatch_size;
  if (request.args.batch > 0)
    for (profiled = 1; profiled < 32 && global_batch % (2 * profiled) == 0;) profiled *= 2;
  std::vector<std::vector<std::string>> profiles;
  for (int r = 0; r < profilers; ++r) {
    std::vector<std::string> argv{"pipetrain", "profile", "--batch", std::to_string(profiled),
                                  "--optimizer", config.optimizer, "--warmup", "3", "--repeats", "5",
                                  "--out", r == 0 ? graph_path : graph_path + "." + std::to_string(r)};
    if (config.model_file.empty()) {
      argv.insert(argv.end(), {"--model", config.model});
    } else {
      argv.insert(argv.end(), {"--model-file", config.model_file, "--data-file", config.data.file});
    }
    for (const auto& o : request.model_options) argv.insert(argv.end(), {"--model-option", o});
    profiles.push_back(std::move(argv));
  }
  std::printf("profiling %s at micro-batch %lld in %d processes at once, %d BLAS thread(s) each, as the ranks run%s\n",
              config.model.c_str(), static_cast<long long>(profiled), profilers, request.blas_threads,
              profilers < request.ranks ? " (the ranks then share the cores)" : "");
  std::fflush(stdout);
  runLikeRanks(profiles, request.blas_threads, std::chrono::seconds(request.timeout_seconds));
  const graph::LayerGraph graph = meanProfile(graph_path, profilers);

  const int64_t memory = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE) / request.ranks;
  planner::ExploreOptions o;
  o.global_batch = global_batch;
  // Costs scale linearly from the profiled batch: an upper bound for larger micro-batches
  // (fixed costs amortise), too optimistic for smaller ones (per-action overhead and
  // small matrix products), so the planner chooses among the profiled size and larger.
  if (request.args.batch == 0) {
    o.microbatch_sizes = {request.args.microbatch_size};
  } else {
    for (int64_t b = profiled; b <= global_batch; b *= 2) o.microbatch_sizes.push_back(b);
  }
  o.schedule = request.args.schedule.name.empty() ? "auto" : request.args.schedule.name;
  o.max_replicas = request.allow_replication ? 0 : 1;
  o.allow_async = request.allow_async;
  o.partitioner = request.partitioner;
  o.use_all_devices = true;
  const planner::Exploration e = planner::explore(graph, localCluster(request.ranks, memory, concurrent), o);
  std::printf("planned for %d local ranks:\n", request.ranks);
  printExploration(e, 5);
  plan::Plan chosen = e.best().plan;
  applyScheduleOptions(request.args.schedule, chosen);
  json_io::writeFile(request.out, chosen.toJson());
  std::printf("plan: %s (profile: %s)\n", request.out.c_str(), graph_path.c_str());
  std::fflush(stdout);
  json_io::Json planner = tableToJson(explorationTable(e, 10));
  planner["notes"] = explorationNotes(e);
  // The profile-based prediction of the plan that runs, for comparison with what it
  // measures: the whole, and each rank's compute per mini-batch (which tells the machine's
  // speed while profiling from the schedule's part of an error).
  json_io::Json busy = json_io::Json::array();
  for (const sim::RankReport& r : e.best().report.ranks) busy.push_back(r.busy_seconds);
  planner["chosen"] = {{"throughput", e.best().report.throughput},
                       {"iteration_seconds", e.best().report.iteration_time},
                       {"rank_busy_seconds", busy}};
  return {chosen, planner};
}

}  // namespace pipetrain::cli
