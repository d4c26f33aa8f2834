#include "pipetrain/job/train_job.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "pipetrain/job/plan_decision.h"
#include "pipetrain/job/rank_job.h"
#include "pipetrain/job/rank_spec.h"
#include "pipetrain/job/torchrun_job.h"
#include "pipetrain/torch/data.h"
#include "pipetrain/torch/trainer.h"
#include "pipetrain/torch/transport.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/text.h"

namespace pipetrain::job {
namespace {

// The files RemovedAtExit holds, for a signal handler: SIGINT, SIGTERM and SIGHUP end
// the process without unwinding (Ctrl-C on a terminal, the Python API's interrupt), and
// unlink is async-signal-safe where std::string is not.
constexpr int kMaxRemoved = 4;
char removed_on_signal[kMaxRemoved][4096];
volatile std::sig_atomic_t removed_on_signal_count = 0;
constexpr int kEndingSignals[] = {SIGINT, SIGTERM, SIGHUP};

extern "C" void removeAndEnd(int signal) {
  for (int i = 0; i < removed_on_signal_count; ++i) ::unlink(removed_on_signal[i]);
  std::signal(signal, SIG_DFL);
  std::raise(signal);  // ends as the signal would have
}

// The launcher's own plan and profile when the user asked for neither (--plan-out keeps
// them), and its ranks' job file: gone when the job ends, however it ends.
class RemovedAtExit {
 public:
  RemovedAtExit() {
    for (int s : kEndingSignals) std::signal(s, removeAndEnd);
  }
  RemovedAtExit(const RemovedAtExit&) = delete;
  RemovedAtExit& operator=(const RemovedAtExit&) = delete;
  ~RemovedAtExit() {
    for (int s : kEndingSignals) std::signal(s, SIG_DFL);
    removed_on_signal_count = 0;
    for (const auto& p : paths_) std::remove(p.c_str());
  }
  void add(const std::string& path) {
    paths_.push_back(path);
    const int k = removed_on_signal_count;
    if (k < kMaxRemoved && path.size() < sizeof removed_on_signal[k]) {
      std::snprintf(removed_on_signal[k], sizeof removed_on_signal[k], "%s", path.c_str());
      removed_on_signal_count = k + 1;
    }
  }

 private:
  std::vector<std::string> paths_;
};

// A report's folder keeps the summary and the metrics log beside the page (unless they
// are asked for elsewhere).
void prepareOutputs(TrainRequest& a) {
  if (!a.outputs.report_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(a.outputs.report_dir, ec);
    if (ec) throw Error("--report " + a.outputs.report_dir + ": cannot create the folder (" + ec.message() + ")");
    const std::filesystem::path dir(a.outputs.report_dir);
    if (a.outputs.summary_json.empty()) a.outputs.summary_json = (dir / "summary.json").string();
    if (a.outputs.log_jsonl.empty()) a.outputs.log_jsonl = (dir / "metrics.jsonl").string();
  }
  // The reporting rank starts the file afresh (a resumed run goes on with it); here it
  // only has to be writable.
  if (!a.outputs.log_jsonl.empty()) text::checkWritable(a.outputs.log_jsonl, "--log-jsonl");
}

// Checks everything that can be checked before any long work, then decides the job's
// plan, as the launcher does for its ranks and rank 0 of a torchrun job for the others.
// `ranks_fixed`: the job's ranks are given (torchrun's), not the checkpoint's to choose.
// Returns the model, opened once here for every check and plan (each rank opens its own).
models::Model decideJobPlan(TrainRequest& a, const TrainAsked& asked, const TrainWatch& watch, bool ranks_fixed,
                            const std::function<cluster::ClusterSpec()>& hosts_network, RemovedAtExit& temporary) {
  // Resuming without a plan goes on under the checkpoint's, on as many ranks as it ran
  // (another rank count plans afresh: any plan loads a checkpoint).
  const std::optional<runtime::Checkpoint> resumed = resolveResume(a.config, watch.say);
  // Every rank resumes from this one (config.resume names it).
  if (resumed && !ranks_fixed && !asked.nproc) a.ranks.nproc = resumed->manifest.world_size;
  models::Model model = runtime::openModel(a.config);  // an unknown model fails here, first
  runtime::checkRecipe(a.config, model);               // a bad recipe before any profiling
  data::openDataset(a.config.data, model.input);       // so does a missing or unfitting dataset
  prepareOutputs(a);
  // Every rank trains exactly the plan decided here: it goes to them as a file. The
  // checkpoint's own mini-batch asks for nothing new.
  const bool same_batch = resumed && a.planning.args.batch == resumed->manifest.plan.samplesPerMinibatch();
  PlanChoice choice{resumed ? &*resumed : nullptr, asked.replanning || (asked.batch && !same_batch),
                    a.planning.plan_out, hosts_network};
  if (choice.out.empty()) {
    choice.out = (std::filesystem::temp_directory_path() /
                  ("pipetrain-plan-" + std::to_string(::getpid()) + ".json")).string();
    temporary.add(choice.out);
    temporary.add(profilePath(choice.out));
  }
  if (const std::optional<LocalPlan> planned = decidePlan(a, model, choice, watch.say))
    watch.planned(*planned, a.ranks.nproc, a.planning.plan_out);
  return model;
}

// The launcher: decides the plan, starts the ranks and sums up what they did.
TrainOutcome runLauncher(TrainRequest& a, const TrainAsked& asked, const TrainWatch& watch) {
  RemovedAtExit temporary;
  const models::Model model = decideJobPlan(a, asked, watch, false, {}, temporary);
  temporary.add(rankJobPath());  // launchRanks hands the ranks their job there
  runtime::checkConfig(a.config, model, a.ranks.nproc);  // the plan against the model and the job
  if (const int cores = a.localCores(); a.ranks.nproc > cores)
    watch.say(
        formatted("note: %d ranks on %d cores take turns on them, pinned round-robin as the simulator "
                  "places them; on 2 cores, 3 ranks trained slower than 2 "
                  "(docs/predictions.md#predicted-against-measured)",
                  a.ranks.nproc, cores));
  LaunchWatch launch;
  launch.progress = watch.progress;
  launch.line = watch.line;
  launch.restart = watch.restart;
  launch.replanned = [&](const std::optional<LocalPlan>& planned) {
    if (planned) watch.planned(*planned, a.ranks.nproc, a.planning.plan_out);
  };
  launch.say = watch.say;
  const LaunchedRun run = launchRanks(a, model, a.planning.plan_file, launch);
  TrainOutcome outcome;
  outcome.summary = summarizeRun(a, model, run, watch.say);
  return outcome;
}

// A rank of a torchrun job, or of ranks started by hand with no plan given: the same job
// as the launcher's (torchrun_job.h). Rank 0 decides the plan and, at the end, sums up
// the run.
TrainOutcome runTorchrunRank(TrainRequest& a, const TrainAsked& asked, const TrainWatch& watch) {
  const auto start = std::chrono::steady_clock::now();
  runtime::Rendezvous rendezvous = runtime::Rendezvous::fromEnvironment();
  rendezvous.timeout = std::chrono::seconds(a.ranks.timeout_seconds);  // a silent peer while measuring the network
  TorchrunJob torchrun(rendezvous);
  rendezvous = torchrun.rendezvous();
  a.ranks.nproc = torchrun.worldSize();
  // The ranks of this host share its cores; each computes on OMP_NUM_THREADS where
  // torchrun (or the user) set it, and the profile is taken on as many.
  if (const char* local = std::getenv("LOCAL_WORLD_SIZE")) a.ranks.local_ranks = std::max(1, std::atoi(local));
  if (const char* t = std::getenv("OMP_NUM_THREADS"); t && a.config.threads == 0) a.config.threads = std::atoi(t);
  torchrun.sharePlace(thisRankPlace(rendezvous, runtime::localRank(torchrun.rank()), a.config.device,
                                    a.blasThreadsPerRank()));
  std::optional<models::Model> model;
  RemovedAtExit temporary;
  std::vector<int> plan_ranks;  // by job rank, where the plan's ranks are not the job's
  std::optional<cluster::ClusterSpec> hosts;  // the network between the hosts, where rank 0 measured it
  if (torchrun.rank() == 0) {
    try {
      const std::vector<RankPlace> places = torchrun.places(std::chrono::seconds(a.ranks.timeout_seconds));
      // Across hosts, the planner plans for the network between them, measured once.
      std::function<cluster::ClusterSpec()> hosts_network;
      if (!oneHost(places))
        hosts_network = [&] {
          hosts = torchrun.networkOfHosts(places, a.ranks.wire, a.config.device, a.planning.reprofile, watch.say);
          return *hosts;
        };
      model = decideJobPlan(a, asked, watch, true, hosts_network, temporary);
      runtime::checkConfig(a.config, *model, a.ranks.nproc);
      // Planned for the hosts: each stage runs on the host it was priced on.
      if (hosts) plan_ranks = planRanksOfJobRanks(a.config.plan, *hosts);
    } catch (const Error& e) {
      torchrun.sharePlanFailure(e.what());
      throw;
    }
    torchrun.sharePlan(a.config.plan, a.planning.record, plan_ranks);
    if (!plan_ranks.empty()) a.ranks.plan_rank = plan_ranks[0];
  } else {
    prepareOutputs(a);  // the reporting rank, whichever it is, writes the metrics log
    resolveResume(a.config, Say());
    // Rank 0 may profile the model first, then has the ranks measure the network.
    if (torchrun.networkMeasurementAnnounced(std::chrono::hours(1)))
      measureNetwork(rendezvous, a.ranks.wire, a.config.device);
    torchrun.receivePlan(a, std::chrono::hours(1));
  }
  const runtime::RankResult mine = runRank(a, watch.rank_progress);
  LaunchedRun run = torchrun.gatherResults(mine, a.ranks.plan_rank >= 0 ? a.ranks.plan_rank : torchrun.rank(), start);
  run.hosts = hosts;  // the run's own prediction prices its messages on the links it crossed
  TrainOutcome outcome;
  if (torchrun.rank() == 0) outcome.summary = summarizeRun(a, *model, run, watch.say);
  return outcome;
}

}  // namespace

TrainOutcome train(TrainRequest& request, const TrainAsked& asked, const TrainWatch& watch) {
  if (std::getenv("RANK") == nullptr) return runLauncher(request, asked, watch);
  if (!startedByLauncher() && TorchrunJob::here()) return runTorchrunRank(request, asked, watch);
  // Ranks started by hand with no plan given: the same job, rank 0 serving its store.
  if (!startedByLauncher() && TorchrunJob::startedByHand() && !planGiven(request))
    return runTorchrunRank(request, asked, watch);
  // A rank its launcher started (its job, plan included, from rank_spec.h's file), or one
  // started by hand that trains the plan its options give.
  if (!startedByLauncher()) {
    const char* world = std::getenv("WORLD_SIZE");
    request.config.plan = planOfRank(request, world ? std::atoi(world) : request.ranks.nproc);
  }
  const char* rank = std::getenv("RANK");
  // Under the launcher, it has said so.
  resolveResume(request.config, !startedByLauncher() && std::string(rank) == "0" ? watch.say : Say());
  const runtime::RankResult mine = runRank(request, watch.rank_progress);
  TrainOutcome outcome;
  if (!startedByLauncher()) outcome.rank = mine;  // a launcher's rank has reported to it
  return outcome;
}

}  // namespace pipetrain::job
