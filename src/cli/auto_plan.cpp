#include "auto_plan.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "launcher.h"
#include "plan_table.h"
#include "prediction.h"
#include "report_pages.h"
#include "pipetrain/plan/profile_shares.h"
#include "pipetrain/planner/explore.h"
#include "pipetrain/sim/evaluate.h"
#include "pipetrain/util/error.h"

namespace pipetrain::cli {
namespace {

// The profiles `path`, `path.1`, ... of one model, taken in shares (process r timed
// share r), merged into `path`; the others are removed.
graph::LayerGraph mergeProfiles(const std::string& path, int count) {
  std::vector<graph::LayerGraph> graphs;
  for (int r = 0; r < count; ++r) {
    const std::string file = r == 0 ? path : path + "." + std::to_string(r);
    graphs.push_back(graph::LayerGraph::load(file));
    if (r > 0) std::remove(file.c_str());
  }
  const graph::LayerGraph merged = plan::mergeProfileShares(graphs);
  json_io::writeFile(path, merged.toJson());
  return merged;
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
  // one profiled alone on this 2-core machine: docs/profiling.md.) Each process times its
  // share of the layers (plan/profile_shares.h) with as many micro-batches in flight as
  // the schedule's rank holds (profile_model.cpp, NOTE(in-flight)), so that it streams a
  // rank's weights and activations, not the whole model's, through the caches it shares;
  // and they time together (ProfileRendezvous). With more ranks than the cores run at
  // once, only as many profile as run at once: the profile is then a core's speed, and
  // the cluster says that the ranks share the cores (time-slicing left
  // in the profile would be counted twice; and it lands unevenly: of three profiles on
  // two cores, one took 1.7x as long as the other two, which ran as fast as alone).
  // Three warm-up runs per layer at least, then more until the heap has settled
  // (profile_model.cpp, NOTE(settling)).
  const int concurrent = std::max(1, request.cores / request.blas_threads);
  const int profilers = std::min(request.ranks, concurrent);
  const std::string graph_path = profilePath(request.out);
  // With --batch the planner chooses the micro-batch size too, from the profiled batch
  // (the largest power of two dividing it, up to 32) up; the layers are timed at 4x that
  // as well, where the batch allows, since a larger micro-batch costs less per sample
  // (the 8 x 1024 mlp's passes at 128 took 0.63x those at 32 in proportion), and the
  // planners interpolate between the two (LayerGraph::secondsAt).
  const int64_t global_batch =
      request.args.batch > 0 ? request.args.batch : request.args.microbatch_size * request.args.microbatches;
  int64_t profiled = request.args.microbatch_size;
  std::string profiled_sizes = std::to_string(profiled);
  if (request.args.batch > 0) {
    for (profiled = 1; profiled < 32 && global_batch % (2 * profiled) == 0;) profiled *= 2;
    const int64_t larger = std::min(global_batch, 4 * profiled);
    profiled_sizes = std::to_string(profiled) + (larger > profiled ? "," + std::to_string(larger) : "");
  }
  // The profiles time together (profiler::ProfileRendezvous), meeting in this directory.
  const std::string rendezvous = graph_path + ".rendezvous";
  std::filesystem::remove_all(rendezvous);
  std::filesystem::create_directories(rendezvous);
  struct RemoveAfter {
    const std::string& dir;
    ~RemoveAfter() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } remove_after{rendezvous};
  // Micro-batches in flight as the schedule's ranks hold them (1F1B's under auto); with
  // --batch, at the most micro-batches the planner may choose.
  const int microbatches = request.args.batch > 0 ? static_cast<int>(std::max<int64_t>(1, global_batch / profiled))
                                                  : request.args.microbatches;
  const std::vector<int> in_flight = plan::profileInFlight(request.args.schedule.name, profilers, microbatches);
  std::vector<std::vector<std::string>> profiles;
  for (int r = 0; r < profilers; ++r) {
    std::vector<std::string> argv{"pipetrain", "profile", "--batch", profiled_sizes,
                                  "--optimizer", config.optimizer, "--warmup", "3", "--repeats", "5",
                                  "--share", std::to_string(r) + "/" + std::to_string(profilers),
                                  "--rendezvous", rendezvous,
                                  "--in-flight", std::to_string(in_flight[r]),
                                  "--out", r == 0 ? graph_path : graph_path + "." + std::to_string(r)};
    // The dataset too: the first stage's forward passes load its micro-batches
    // (profile_model.cpp, NOTE(input-loading)).
    if (config.model_file.empty()) {
      argv.insert(argv.end(), {"--model", config.model, "--dataset", config.data.name});
      if (config.data.fashion_mnist_dir != data::DataOptions().fashion_mnist_dir)
        argv.insert(argv.end(), {"--data-dir", config.data.fashion_mnist_dir});
    } else {
      argv.insert(argv.end(), {"--model-file", config.model_file, "--data-file", config.data.file});
    }
    for (const auto& o : request.model_options) argv.insert(argv.end(), {"--model-option", o});
    profiles.push_back(std::move(argv));
  }
  std::string held;
  for (int r = 0; r < profilers; ++r) held += (r ? "," : "") + std::to_string(in_flight[r]);
  std::printf("profiling %s at micro-batch %s in %d processes at once, %d BLAS thread(s) each, as the ranks run%s: "
              "a share of the layers each, micro-batches in flight %s\n",
              config.model.c_str(), profiled_sizes.c_str(), profilers, request.blas_threads,
              profilers < request.ranks ? " (the ranks then share the cores)" : "", held.c_str());
  std::fflush(stdout);
  runLikeRanks(profiles, request.blas_threads, std::chrono::seconds(request.timeout_seconds));
  const graph::LayerGraph graph = mergeProfiles(graph_path, profilers);

  const int64_t memory = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE) / request.ranks;
  planner::ExploreOptions o;
  o.global_batch = global_batch;
  // Below the smallest profiled size costs would only scale in proportion, too optimistic
  // (per-action overhead and small matrix products), so the planner chooses among the
  // profiled sizes and larger; above the largest profiled, in proportion: an upper bound.
  if (request.args.batch == 0) {
    o.microbatch_sizes = {request.args.microbatch_size};
  } else {
    for (int64_t b = profiled; b <= global_batch; b *= 2)
      if (global_batch % b == 0) o.microbatch_sizes.push_back(b);  // 256 of 384 would leave a remainder
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
  // speed while profiling from the schedule's part of an error). Where the ranks share
  // the cores, that compute stretches while they take turns; so each rank's compute on
  // a core of its own too: its work, to set beside the run's time on a core.
  json_io::Json busy = json_io::Json::array(), alone = json_io::Json::array();
  for (const sim::RankReport& r : e.best().report.ranks) busy.push_back(r.busy_seconds);
  const cluster::ClusterSpec unshared = localCluster(request.ranks, memory, request.ranks);
  for (const sim::RankReport& r : sim::predictReport(graph, unshared, e.best().plan).ranks)
    alone.push_back(r.busy_seconds);
  planner["chosen"] = {{"throughput", e.best().report.throughput},
                       {"iteration_seconds", e.best().report.iteration_time},
                       {"rank_busy_seconds", busy},
                       {"rank_core_seconds", alone}};
  return {chosen, planner};
}

}  // namespace pipetrain::cli
