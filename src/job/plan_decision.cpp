#include "pipetrain/job/plan_decision.h"

#include "pipetrain/util/error.h"

namespace pipetrain::job {
namespace {

bool handMade(const PlanArgs& args) { return !args.stage_bounds.empty() || args.data_parallel; }

// Refuses `from` where it is not a checkpoint of this run under `plan` (any plan loads
// a checkpoint, but its mini-batch must be the run's).
void checkResumable(const runtime::Checkpoint& from, const runtime::TrainConfig& config, const plan::Plan& plan) {
  runtime::TrainConfig run = config;
  run.plan = plan;
  const std::string difference = from.manifest.identity.differenceFrom(runtime::identityOf(run));
  if (!difference.empty()) throw Error("--resume " + from.dir + " does not match this run: " + difference);
}

}  // namespace

std::optional<LocalPlan> decidePlan(TrainRequest& request, const models::Model& model, const PlanChoice& choice,
                                    const Say& say) {
  runtime::TrainConfig& config = request.config;
  // A checkpoint of another run is refused before any profiling: all but the batch,
  // which the plan decides, can be compared now.
  if (choice.resumed) {
    checkResumable(*choice.resumed, config, choice.resumed->manifest.plan);
    const int64_t trained = choice.resumed->manifest.plan.samplesPerMinibatch();
    if (request.planning.args.batch > 0 && request.planning.args.batch != trained)
      throw Error("--resume " + choice.resumed->dir + " trained mini-batches of " + std::to_string(trained) +
                  " samples, and --batch asks for " + std::to_string(request.planning.args.batch) +
                  ": resume with --batch " + std::to_string(trained) + ", or start afresh");
  }
  std::optional<LocalPlan> planned;
  if (!request.planning.plan_file.empty()) {
    config.plan = plan::Plan::load(request.planning.plan_file);
    if (!request.planning.plan_out.empty()) json_io::writeFile(choice.out, config.plan.toJson());
  } else if (handMade(request.planning.args)) {
    config.plan = planFromArgs(model, request.planning.args, request.ranks.nproc);
    json_io::writeFile(choice.out, config.plan.toJson());
  } else if (choice.resumed && request.ranks.nproc == choice.resumed->manifest.world_size && !choice.replanning_asked) {
    config.plan = choice.resumed->manifest.plan;
    json_io::writeFile(choice.out, config.plan.toJson());
  } else {
    const std::optional<cluster::ClusterSpec> hosts =
        choice.hosts_network ? std::optional<cluster::ClusterSpec>(choice.hosts_network()) : std::nullopt;
    const ProfileRequest profile{
        request.ranks.nproc,   request.blasThreadsPerRank(),  request.localCores(),      request.source.model_options,
        request.planning.args, request.ranks.timeout_seconds, request.planning.reprofile};
    const AutoPlanRequest auto_plan{profile,
                                    !request.planning.no_replication,
                                    request.planning.allow_async,
                                    request.planning.partitioner,
                                    request.planning.args.recompute,
                                    request.planning.rank_memory_bytes,
                                    choice.out,
                                    request.ranks.wire,
                                    request.planning.objective,
                                    request.planning.calibration,
                                    hosts ? &*hosts : nullptr};
    planned = planLocalRun(config, model, auto_plan, say);
    config.plan = planned->plan;
    request.planning.record = planned->planner;
  }
  if (choice.resumed) {
    checkResumable(*choice.resumed, config, config.plan);
    // Refused here, before any rank starts: the ranks would each say it, and the
    // launcher would then advise resuming the very checkpoint.
    runtime::checkEpochsLeft(*choice.resumed, config.epochs);
  }
  if (request.planning.plan_file.empty() || !request.planning.plan_out.empty()) request.planning.plan_file = choice.out;
  return planned;
}

bool planGiven(const TrainRequest& request) {
  return !request.planning.plan_file.empty() || handMade(request.planning.args);
}

plan::Plan planOfRank(const TrainRequest& request, int world_size) {
  if (!request.planning.plan_file.empty()) return plan::Plan::load(request.planning.plan_file);
  if (handMade(request.planning.args))
    return planFromArgs(runtime::openModel(request.config), request.planning.args, world_size);
  throw Error("ranks started by hand need a plan: --plan FILE (from `pipetrain plan` or `pipetrain train "
              "--plan-out`), --stage-bounds or --data-parallel");
}

}  // namespace pipetrain::job
