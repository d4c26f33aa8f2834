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
    if (request.plan_args.batch > 0 && request.plan_args.batch != trained)
      throw Error("--resume " + choice.resumed->dir + " trained mini-batches of " + std::to_string(trained) +
                  " samples, and --batch asks for " + std::to_string(request.plan_args.batch) +
                  ": resume with --batch " + std::to_string(trained) + ", or start afresh");
  }
  std::optional<LocalPlan> planned;
  if (!request.plan.empty()) {
    config.plan = plan::Plan::load(request.plan);
    if (!request.plan_out.empty()) json_io::writeFile(choice.out, config.plan.toJson());
  } else if (handMade(request.plan_args)) {
    config.plan = planFromArgs(model, request.plan_args, request.nproc);
    json_io::writeFile(choice.out, config.plan.toJson());
  } else if (choice.resumed && request.nproc == choice.resumed->manifest.world_size && !choice.replanning_asked) {
    config.plan = choice.resumed->manifest.plan;
    json_io::writeFile(choice.out, config.plan.toJson());
  } else {
    const std::optional<cluster::ClusterSpec> hosts =
        choice.hosts_network ? std::optional<cluster::ClusterSpec>(choice.hosts_network()) : std::nullopt;
    const ProfileRequest profile{request.nproc,   request.blasThreadsPerRank(), request.localCores(),
                                 request.model_options, request.plan_args,   request.timeout_seconds,
                                 request.reprofile};
    const AutoPlanRequest auto_plan{profile,
                                    !request.no_replication,
                                    request.allow_async,
                                    request.partitioner,
                                    request.plan_args.recompute,
                                    request.rank_memory_bytes,
                                    choice.out,
                                    request.wire,
                                    request.objective,
                                    request.calibration,
                                    hosts ? &*hosts : nullptr};
    planned = planLocalRun(config, model, auto_plan, say);
    config.plan = planned->plan;
    request.planner = planned->planner;
  }
  if (choice.resumed) {
    checkResumable(*choice.resumed, config, config.plan);
    // Refused here, before any rank starts: the ranks would each say it, and the
    // launcher would then advise resuming the very checkpoint.
    runtime::checkEpochsLeft(*choice.resumed, config.epochs);
  }
  if (request.plan.empty() || !request.plan_out.empty()) request.plan = choice.out;
  return planned;
}

bool planGiven(const TrainRequest& request) { return !request.plan.empty() || handMade(request.plan_args); }

plan::Plan planOfRank(const TrainRequest& request, int world_size) {
  if (!request.plan.empty()) return plan::Plan::load(request.plan);
  if (handMade(request.plan_args)) return planFromArgs(runtime::openModel(request.config), request.plan_args, world_size);
  throw Error("ranks started by hand need a plan: --plan FILE (from `pipetrain plan` or `pipetrain train "
              "--plan-out`), --stage-bounds or --data-parallel");
}

}  // namespace pipetrain::job
