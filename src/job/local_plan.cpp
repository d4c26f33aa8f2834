#include "pipetrain/job/local_plan.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <vector>

#include "pipetrain/job/local_cluster.h"
#include "pipetrain/job/run_profile.h"
#include "pipetrain/planner/explore.h"
#include "pipetrain/planner/time_to_target.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/sim/evaluate.h"
#include "pipetrain/sim/plan_traffic.h"
#include "pipetrain/torch/device.h"
#include "pipetrain/torch/profiler.h"
#include "pipetrain/report/exploration_table.h"
#include "pipetrain/report/pages.h"
#include "pipetrain/util/clock.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/text.h"

namespace pipetrain::job {

std::string profilePath(const std::string& plan_path) { return plan_path + ".profile.json"; }

std::string calibrationPath(const std::string& profile_path) { return profile_path + ".calibration.json"; }

namespace {

// Before any profiling: the weights, their gradients and the optimizer's state against the
// ranks' memory. However the planner cuts the model, they need their sum spread over
// every rank and the largest layer's on one, activations aside; a model that fails this
// is refused in a second, not after minutes of profiling (the planner's own refusal then
// compares each stage's whole need with a rank's memory).
void checkStateFits(const runtime::TrainConfig& config, const models::Model& model, int ranks, int64_t memory) {
  int64_t total = 0, largest = 0;
  std::string largest_name;
  for (const models::Layer& layer : model.layers) {
    const int64_t weights = models::parameterBytes(layer);
    const int64_t state = 2 * weights + profiler::optimizerStateBytes(config.optimizer.name, weights);
    total += state;
    if (state > largest) largest = state, largest_name = layer.name;
  }
  const auto bytes = [](int64_t b) { return text::humanBytes(static_cast<double>(b)); };
  const std::string what = " of weights, gradients and " + config.optimizer.name + "'s state";
  if (total > memory * ranks)
    throw Error("model '" + config.model + "' needs " + bytes(total) + what + " before any activation, more than its " +
                std::to_string(ranks) + " ranks hold together (" + std::to_string(ranks) + " x " + bytes(memory) +
                "); use more ranks, ranks with more memory, or a smaller model");
  if (largest > memory)
    throw Error("model '" + config.model + "': its layer '" + largest_name + "' needs " + bytes(largest) + what +
                ", more than a rank's " + bytes(memory) + "; no cut between layers can place it");
}

}  // namespace

LocalPlan planLocalRun(const runtime::TrainConfig& config, const models::Model& model, const AutoPlanRequest& request,
                       const Say& say) {
  const ProfileRequest& job = request.profile;  // the ranks and their micro-batching
  const int layers = static_cast<int>(model.layers.size());
  if (!request.allow_replication && job.ranks > layers)
    throw Error("--no-replication: model '" + config.model + "' has " + std::to_string(layers) +
                " layers, too few for a pipeline over " + std::to_string(job.ranks) +
                " ranks; use fewer ranks (--nproc) or allow replicated stages");
  // The ranks' device: the host's cores, or GPUs, which ranks beyond their count share
  // (runtime::rankDevice), each rank then holding its share of its GPU's memory.
  const torch::Device device = runtime::rankDevice(config.device, 0);
  const bool gpus = !device.is_cpu();
  const int concurrent = gpus ? std::min(job.ranks, runtime::deviceKind(device).count())
                              : std::max(1, job.cores / job.blas_threads);
  const int64_t ranks_per_device = gpus ? (job.ranks + concurrent - 1) / concurrent : job.ranks;
  const int64_t memory = request.rank_memory_bytes > 0 ? request.rank_memory_bytes
                         : gpus ? runtime::deviceMemoryBytes(device) / ranks_per_device
                                : static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE) / job.ranks;
  if (!request.hosts) checkStateFits(config, model, job.ranks, memory);
  const std::string graph_path = profilePath(request.out);
  const RunProfile profile = profileForRun(config, model, job, graph_path, say);
  const graph::LayerGraph& graph = profile.graph;
  const int64_t global_batch =
      job.args.batch > 0 ? job.args.batch : job.args.microbatch_size * job.args.microbatches;
  const auto planning_start = std::chrono::steady_clock::now();
  planner::ExploreOptions o;
  o.global_batch = global_batch;
  if (job.args.batch == 0) o.microbatch_sizes = {job.args.microbatch_size};
  o.schedule = job.args.schedule.name.empty() ? "auto" : job.args.schedule.name;
  o.max_replicas = request.allow_replication ? 0 : 1;
  o.allow_async = request.allow_async;
  // Asynchronous schedules step stages apart, which would let tied copies on two stages
  // drift apart (runtime/tied_gradients.h): the planner keeps each group on one stage there.
  for (const models::TiedWeight& weight : model.tied) {
    std::vector<std::string>& group = o.tied_layers.emplace_back();
    for (const auto& holder : weight.holders) group.push_back(model.layers.at(holder.layer).name);
  }
  const bool async_considered = o.allow_async || (o.schedule != "auto" && schedule::isAsynchronous(o.schedule));
  if (async_considered && !model.tied.empty())
    say(formatted("note: layers %s share a weight, so asynchronous schedules are considered only with them on one "
                "stage",
                models::describeHolders(model, model.tied.front()).c_str()));
  o.partitioner = request.partitioner;
  o.recompute = request.recompute;
  o.use_all_devices = true;
  // The profile's passes agree within this spread (profileForRun takes the default), so
  // plans predicted closer than that are equals; their shape decides, not the noise.
  o.noise = profiler::ProfileOptions{}.spread;
  const LocalSums sums = localSums(request.wire, gpus);
  // The runtime's own time per action as this model's runs measured it, where they did
  // (graph::LearnedActionOverhead): it ran 5-66 us from one model to the next here.
  const graph::LearnedActionOverhead& learned = graph.actionOverhead();
  const double action_overhead = learned.runs > 0 ? learned.seconds : -1;
  if (learned.runs > 0 && !request.hosts)
    say(formatted("the runtime's own time per action: %.1f us, as %d run(s) of this profile measured it",
                  learned.seconds * 1e6, learned.runs));
  const cluster::ClusterSpec cluster =
      request.hosts ? clusterOfHosts(*request.hosts, request.rank_memory_bytes)
                    : localCluster(job.ranks, memory, concurrent, sums, gpus, action_overhead);
  planner::ObjectiveInputs inputs;
  std::optional<runtime::RuleCalibrator> calibrator;
  const std::string calibration_path =
      calibrationPath(profile.cached_path.empty() ? graph_path : profile.cached_path);
  inputs.calibrator = [&]() -> planner::Calibrator& {
    if (!calibrator) {
      calibrator.emplace(config, global_batch, request.calibration, calibration_path);
      say(formatted("%s: calibrating the update rules that could win (cache: %s)", request.objective->name(),
                    calibration_path.c_str()));
    }
    return *calibrator;
  };
  o.objective = request.objective;
  const planner::Exploration e = planner::explore(graph, cluster, o, inputs);
  const double calibration_seconds = e.calibration_seconds;
  const double planning_seconds = secondsSince(planning_start) - calibration_seconds;
  plan::Plan chosen = e.best().plan;
  if (o.schedule != "auto" && chosen.numStages() == 1 && job.ranks > 1)
    say(formatted("note: %s on %d ranks planned data parallelism, which runs each replica's passes in %s's order; "
                  "--no-replication plans a %s pipeline",
                  o.schedule.c_str(), job.ranks, o.schedule.c_str(), o.schedule.c_str()));
  applyScheduleOptions(job.args.schedule, chosen);
  json_io::writeFile(request.out, chosen.toJson());
  report::PlannerRecord planner;
  planner.candidates = report::explorationTable(e, 10);
  planner.notes = report::explorationNotes(e);
  planner.profile = profile.source;
  planner.planning_seconds = planning_seconds;
  planner.objective = e.objective->name();
  if (calibrator)
    planner.calibration = report::CalibrationRecord{calibration_path, calibration_seconds, e.calibrationFigures()};
  // The profile-based prediction of the plan that runs, for comparison with what it
  // measures: the whole, and each rank's compute per mini-batch (which tells the machine's
  // speed while profiling from the schedule's part of an error). Where the ranks share
  // the cores, that compute stretches while they take turns; so each rank's compute on
  // a core of its own too: its work, to set beside the run's time on a core.
  report::ChosenPrediction& chosen_prediction = planner.chosen;
  chosen_prediction.throughput = e.best().report.throughput;
  chosen_prediction.iteration_seconds = e.best().report.iteration_time;
  chosen_prediction.process_memory_runs = graph.processMemory().runs;
  chosen_prediction.probe_seconds = graph.profiledAs().probe_seconds;
  for (const sim::RankReport& r : e.best().report.ranks) {
    chosen_prediction.rank_busy_seconds.push_back(r.busy_seconds);
    chosen_prediction.rank_peak_memory_bytes.push_back(r.peak_memory_bytes);
    chosen_prediction.rank_process_bytes.push_back(r.process_bytes);
  }
  const cluster::ClusterSpec unshared =
      request.hosts ? cluster : localCluster(job.ranks, memory, job.ranks, sums, gpus, action_overhead);
  for (const sim::RankReport& r : sim::predictReport(graph, unshared, e.best().plan).ranks)
    chosen_prediction.rank_core_seconds.push_back(r.busy_seconds);
  // What the plan sends over each link per mini-batch (which links it crosses).
  planner.links = sim::planTraffic(sim::CostModel(graph, cluster, e.best().plan));
  return {chosen, planner, e, profile.cached_path.empty() ? graph_path : profile.cached_path};
}

}  // namespace pipetrain::job
