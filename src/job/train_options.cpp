#include "pipetrain/job/train_options.h"

#include "pipetrain/planner/planner_options.h"
#include "pipetrain/recipe/recipe.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/torch/models.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/text.h"

namespace pipetrain::job {
namespace {

using options::Option;

const char* const kModel = "What to train";
const char* const kRecipe = "The recipe";
const char* const kPlan = "Where the plan comes from";
const char* const kRanks = "How the ranks run";
const char* const kWritten = "What is written";

// "true" or "false", for the options that take one (a flag cannot be turned off).
std::function<void(const std::string&)> truth(bool& field) {
  return [&field](const std::string& value) { field = value == "true"; };
}

std::vector<Option> recipeOptions(runtime::TrainConfig& c) {
  recipe::OptimizerOptions& o = c.optimizer;
  recipe::LearningRateSchedule& s = c.lr_schedule;
  return {
      Option{"optimizer", kRecipe,
       text::joined(recipe::optimizerNames()) + ", as torch.optim's Adam, AdamW (decoupled weight decay) and SGD",
       &o.name}
          .shown(),
      Option{"lr", kRecipe, "learning rate (the schedule's base rate)", &c.lr}.shown(),
      {"weight-decay", kRecipe,
       "weight decay (default: torch.optim's, 0.01 for adamw and 0 otherwise); L2 for adam and sgd", &o.weight_decay},
      {"no-decay", kRecipe,
       "parameters exempt from weight decay: hf (Hugging Face Trainer's name patterns), 1d (every parameter of fewer "
       "than 2 dimensions: biases and norms), or comma-separated regular expressions searched in the parameters' "
       "names, e.g. 'bias,norm'",
       &o.no_decay},
      Option{"betas", kRecipe, "adam, adamw: the moments' decay rates (default: 0.9,0.999)",
       std::function<void(const std::vector<double>&)>([&o](const std::vector<double>& b) {
         if (b.size() != 2) throw Error("--betas takes two numbers, e.g. 0.9,0.95");
         o.beta1 = b[0];
         o.beta2 = b[1];
       })}
          .exactly(2),
      Option{"eps", kRecipe, "adam, adamw: the denominator's epsilon", &o.eps}.shown(),
      Option{"momentum", kRecipe, "sgd: momentum", &o.momentum}.shown(),
      {"nesterov", kRecipe, "sgd: Nesterov momentum", &o.nesterov},
      Option{"lr-schedule", kRecipe,
       text::joined(recipe::scheduleNames()) +
           ": the decay after the warm-up, to --lr-min at the run's last step (step: by --lr-gamma every "
           "--lr-step-size steps)",
       &s.decay}
          .shown(),
      {"lr-warmup", kRecipe,
       "linear learning-rate warm-up over this many optimizer steps of each stage (PipeDream steps per micro-batch)",
       &s.warmup_steps},
      {"lr-min", kRecipe, "the floor the decay reaches (an absolute rate)", &s.min_lr},
      {"lr-step-size", kRecipe, "--lr-schedule step: optimizer steps between decays", &s.step_size},
      Option{"lr-gamma", kRecipe, "--lr-schedule step: the factor of each decay", &s.gamma}.shown(),
      Option{"clip-grad-norm", kRecipe,
       "clip gradients to this global norm, as torch.nn.utils.clip_grad_norm_ over the whole model (each stage's own "
       "norm under an asynchronous schedule)",
       &c.clip_grad_norm}
          .positive(),
  };
}

// The options that steer the planner or fix the plan.
std::vector<Option> planOptions(TrainRequest& r) {
  PlanArgs& pa = r.planning.args;
  using Setter = std::function<void(const std::string&)>;
  return {
      {"plan", kPlan, "plan JSON: stages (by layer name), micro-batching and schedule", &r.planning.plan_file},
      Option{"batch", kPlan,
             "samples per optimizer step, instead of --microbatches and --microbatch-size: the planner also chooses "
             "how to split them (micro-batch sizes: powers of two dividing it, from the profiled one up)",
             &pa.batch}
          .positive(),
      Option{"microbatches", kPlan, "micro-batches per mini-batch", &pa.microbatches}.positive().shown(),
      Option{"microbatch-size", kPlan, "samples per micro-batch", &pa.microbatch_size}.positive().shown(),
      {"schedule", kPlan,
       schedule::scheduleNameList() +
           ", or auto (default: the planner's choice; 1f1b with --stage-bounds or --data-parallel)",
       &pa.schedule.name},
      {"allow-async", kPlan, "without --plan: the planner may choose pipedream, 2bw or pipemare",
       &r.planning.allow_async},
      planner::objectiveOption(r.planning.objective, kPlan, "without --plan: "),
      Option{"calibration-seconds", kPlan, "time to accuracy: the training budget of each update rule's calibration",
             &r.planning.calibration.seconds_per_rule}
          .positive()
          .shown(),
      Option{"chunks", kPlan, "interleaved: stages per rank", &pa.schedule.chunks}.positive(),
      {"vertical-sync", kPlan, "pipedream: every stage uses the weight version the input stage used for a micro-batch",
       &pa.schedule.vertical_sync},
      Option{"pipemare-t1", kPlan, "pipemare: learning-rate rescheduling, each stage from lr/delay up to lr [true]",
             truth(pa.schedule.pipemare_lr_warmup)}
          .among({"true", "false"}),
      Option{"pipemare-warmup", kPlan, "pipemare: T1's warm-up steps K", &pa.schedule.pipemare_warmup_steps}.shown(),
      Option{"pipemare-t2", kPlan, "pipemare: discrepancy correction of the backward pass's weights [true]",
             truth(pa.schedule.pipemare_correction)}
          .among({"true", "false"}),
      Option{"pipemare-decay", kPlan, "pipemare: T2's decay D (gamma = D^(1/delay))", &pa.schedule.pipemare_decay}
          .shown(),
      {"no-replication", kPlan, "without --plan: plan a pure pipeline, no replicated stages",
       &r.planning.no_replication},
      {"reprofile", kPlan,
       "without --plan: profile the model again even where the profile cache holds its profile "
       "($PIPETRAIN_CACHE_DIR, else ~/.cache/pipetrain/profiles), and a job across hosts their network",
       &r.planning.reprofile},
      planner::partitionerOption(r.planning.partitioner, kPlan),
      planner::recomputeOption(pa.recompute, kPlan),
      {"rank-memory", kPlan,
       "without --plan: the memory the planner gives each rank, e.g. 512MiB or 16GiB (default: physical memory / "
       "ranks): plan as a smaller device would hold it",
       Setter(
           [&r](const std::string& size) { r.planning.rank_memory_bytes = text::parseBytes(size, "--rank-memory"); })},
      Option{"stage-bounds", kPlan, "layer boundaries, e.g. 0,2,4 (default: the planner's choice)", &pa.stage_bounds}
          .repeated(),
      {"data-parallel", kPlan, "one stage replicated on every rank (plain data parallelism)", &pa.data_parallel},
  };
}

std::vector<Option> modelOptions(TrainRequest& r) {
  runtime::TrainConfig& c = r.config;
  std::vector<Option> out = {
      Option{"model", kModel, modelNameList(), &c.model}.shown(),
      {"model-file", kModel, "your own model: a TorchScript file saved from Python (docs/byo.md); needs --data-file",
       &c.model_file},
      {"data-file", kModel,
       "your own data: a torch.save file of {\"inputs\", \"labels\"[, \"test_inputs\", \"test_labels\"]}, or a token "
       "stream FILE.bin (flat uint16 tokens as nanoGPT writes them; --context, --token-dtype)",
       &c.data.file},
  };
  for (Option& o : tokenStreamOptions(c.data, kModel)) out.push_back(std::move(o));
  for (Option& o : std::vector<Option>{
           {"model-py", kModel,
            "your own model as Python: FILE.py:EXPRESSION or MODULE:EXPRESSION making the nn.Module, captured by "
            "python/pipetrain_capture.py on --data-file's first inputs and cached (docs/byo.md)",
            &r.source.model_py.spec},
           {"model-output", kModel,
            "with --model-py: the tensor to train on where forward() returns several (a ModelOutput's logits)",
            &r.source.model_py.output},
           Option{"model-option", kModel, "model size, KEY=INTEGER (e.g. layers=8 width=256)", &r.source.model_options}
               .repeated(),
           {"dataset", kModel,
            "fashion-mnist, fortunes or synthetic (default: fashion-mnist for fmnist-cnn, else synthetic)",
            &c.data.name},
           {"data-dir", kModel, "where the dataset's files are (default: the Debian package's folder)",
            &r.source.data_dir},
           Option{"epochs", kModel, "epochs", &c.epochs}.positive().shown(),
           Option{"max-steps", kModel, "stop each epoch after this many mini-batches", &c.max_steps_per_epoch}
               .positive(),
           Option{"seed", kModel, "model initialisation and data order", &c.seed}.shown(),
           {"no-eval", kModel, "skip test accuracy at epoch ends", std::function<void()>([&c] { c.evaluate = false; })},
       })
    out.push_back(std::move(o));
  return out;
}

std::vector<Option> rankOptions(TrainRequest& r) {
  runtime::TrainConfig& c = r.config;
  return {
      Option{"nproc", kRanks, "local ranks to launch (ignored when RANK is set)", &r.ranks.nproc}.positive().shown(),
      Option{"device", kRanks,
             "cpu; cuda (local rank r takes GPU r mod the GPUs, so ranks may share one); cuda:N or cuda:N,M,... "
             "(rank r the list's entry r mod its length); auto: cuda where LibTorch sees a GPU",
             &c.device}
          .shown(),
      Option{"wire", kRanks,
             "what carries activations, gradients and gradient buckets between ranks: nccl (each rank on a GPU of "
             "its own), shm (gradient sums in shared memory between CPU ranks of one host, messages over gloo), "
             "gloo (through host copies on GPUs), auto: nccl where it can, else shm where it can, else gloo; "
             "coordination always goes over gloo",
             &r.ranks.wire}
          .among({"auto", "gloo", "shm", "nccl"})
          .shown(),
      Option{"precision", kRanks, "fp32, or bf16 (autocast; fp32 master weights and optimizer state)", &c.precision}
          .shown(),
      Option{"cores", kRanks, "cores the local ranks share (default: all); each rank gets cores / nproc",
             &r.ranks.cores}
          .positive(),
      Option{"timeout", kRanks, "seconds before a silent peer ends the job", &r.ranks.timeout_seconds}
          .positive()
          .shown(),
      {"checkpoint-dir", kRanks,
       "save checkpoints here: at every epoch's end, and every --checkpoint-every mini-batches", &c.checkpoint_dir},
      Option{"checkpoint-every", kRanks,
             "mini-batches between checkpoints within an epoch (an asynchronous schedule drains there)",
             &c.checkpoint_every}
          .positive(),
      Option{"keep-checkpoints", kRanks, "how many of the newest checkpoints stay", &c.checkpoint_keep}
          .positive()
          .shown(),
      {"resume", kRanks,
       "continue from this checkpoint, or from the newest intact one in this folder; under its plan unless a plan "
       "is given (any plan loads it)",
       &c.resume},
      Option{"max-restarts", kRanks,
             "restart the job after a rank fails, up to this many times, from the newest checkpoint of "
             "--checkpoint-dir (from the start without one)",
             &r.ranks.max_restarts}
          .nonNegative()
          .shown(),
      Option{"min-nproc", kRanks,
             "elastic: when a rank fails again after --max-restarts, go on with one rank fewer, down to this many, "
             "re-planned for them and resumed from the newest checkpoint of --checkpoint-dir",
             &r.ranks.min_nproc}
          .positive(),
  };
}

std::vector<Option> writtenOptions(TrainRequest& r) {
  runtime::TrainConfig& c = r.config;
  return {
      {"plan-out", kWritten, "without --plan: where to write the plan the planner chooses", &r.planning.plan_out},
      {"export", kWritten, "with --model-file: write the trained model as TorchScript here", &c.export_path},
      {"torch-trace", kWritten,
       "PREFIX: each rank r writes a Chrome trace (LibTorch's profiler: operators, GPU kernels and copies) of "
       "mini-batches 21 and 22 to PREFIX.rank<r>.json (the run needs 22 or more)",
       &c.torch_trace},
      {"trace", kWritten, "write a typical mini-batch's measured Chrome trace (the median by duration of the last 9)",
       &r.outputs.trace},
      {"svg", kWritten, "write a typical mini-batch's measured Gantt chart (the median by duration of the last 9)",
       &r.outputs.svg},
      {"summary-json", kWritten, "write the summary as JSON", &r.outputs.summary_json},
      {"log-jsonl", kWritten, "write a JSON line per mini-batch and per evaluation (docs/report.md)",
       &r.outputs.log_jsonl},
      {"report", kWritten,
       "write report.html (plan, predicted and measured Gantt, per-rank costs, loss and accuracy) into this folder",
       &r.outputs.report_dir},
  };
}

}  // namespace

std::string modelNameList() { return text::joined(models::modelNames()); }

std::vector<Option> tokenStreamOptions(data::DataOptions& data, const std::string& group) {
  return {{"context", group,
           "a token stream (--data-file FILE.bin): tokens per sample, the model's context length (a --model-file "
           "model's; the zoo's gpt has its own)",
           &data.context},
          Option{"token-dtype", group, "a token stream (--data-file FILE.bin): uint16 or uint32", &data.token_dtype}
              .shown()};
}

std::vector<Option> trainOptions(TrainRequest& request) {
  std::vector<Option> out;
  for (std::vector<Option> part : {modelOptions(request), recipeOptions(request.config), planOptions(request),
                                   rankOptions(request), writtenOptions(request)})
    for (Option& o : part) out.push_back(std::move(o));
  return out;
}

}  // namespace pipetrain::job
