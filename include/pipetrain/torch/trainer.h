// Training on one rank: the epoch loop around PipelineExecutor. Every rank runs
// trainRank() with the same config; the data order, the model's initial weights and the
// plan agree across ranks without further coordination.
//
// Each epoch is one Program (plan::programForPlan over the epoch's mini-batches): a
// flushing schedule repeats its mini-batch, an asynchronous one streams through the
// whole epoch without a flush and drains once at its end. With checkpoints every N
// mini-batches the epoch runs as Programs of N, a checkpoint after each (checkpoint.h).
// Evaluation after each epoch runs the plan's forward-only Program with the same
// executor.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pipetrain/checkpoint/manifest.h"
#include "pipetrain/plan/plan.h"
#include "pipetrain/recipe/recipe.h"
#include "pipetrain/schedule/program.h"
#include "pipetrain/torch/data.h"
#include "pipetrain/torch/executor.h"
#include "pipetrain/torch/models.h"
#include "pipetrain/torch/transport.h"

namespace pipetrain::runtime {

struct TrainConfig {
  std::string model = "fmnist-cnn";
  models::ModelConfig model_config;
  std::string model_file;                // a TorchScript model instead of the zoo's (needs data.file)
  data::DataOptions data;                // name, paths, seed for synthetic data, or the user's file
  // Stages (runs of the model's layers, by name), their replicas (one rank per device, in
  // plan::rankDeviceNames order), micro-batching and schedule.
  plan::Plan plan;
  int epochs = 1;
  int64_t max_steps_per_epoch = -1;      // -1 = the whole epoch
  // The recipe (recipe/recipe.h): optimizer, the rate of every step, clipping.
  recipe::OptimizerOptions optimizer;
  double lr = 1e-3;                      // the base rate, which the schedule shapes
  // Over the optimizer steps of each stage: a stage steps once per mini-batch, but after
  // every micro-batch (per replica round) under PipeDream; the decay runs to the run's
  // last step (epochs x mini-batches per epoch x the stage's steps per mini-batch).
  recipe::LearningRateSchedule lr_schedule;
  // Clip gradients to this norm (0: off): the whole model's under a synchronous
  // schedule, each stage's own under an asynchronous one (executor.h, StepRecipe).
  double clip_grad_norm = 0;
  uint64_t seed = 0;                     // model initialisation and data order
  bool evaluate = true;                  // test accuracy and loss at every epoch end
  int threads = 0;                       // intra-op threads; 0 = leave LibTorch's default
  std::string device = "cpu";            // each rank's, by runtime::rankDevice (device.h)
  std::string precision = "fp32";        // fp32 or bf16 (autocast; precision.h)
  std::string export_path;               // model_file only: rank 0 writes the trained TorchScript here
  // When set, each rank r writes a Chrome trace of two mini-batches (LibTorch's profiler,
  // Kineto: operators, and on a GPU kernels and copies) to torch_trace.rank<r>.json,
  // those after its kTraceAfterSteps-th (runtime/torch_trace.h).
  std::string torch_trace;
  // Checkpoints (checkpoint.h) into this folder, when set: at every epoch's end and, when
  // `checkpoint_every` > 0, every that many mini-batches within an epoch (an asynchronous
  // schedule drains there). The newest `checkpoint_keep` stay.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int checkpoint_keep = 2;
  // Continue from this checkpoint, or from the newest intact one in this folder, under
  // this config's plan (which may differ from the checkpoint's).
  std::string resume;
};

// One evaluation, after an epoch.
struct EvalPoint {
  int epoch = 0;                         // 1-based
  int64_t samples = 0;                   // trained so far, by every start of the run (resumed ones too)
  double train_seconds = 0;              // inside training steps so far
  double wall_seconds = 0;               // since training began, evaluations included
  double test_accuracy = -1;             // -1 under a loss without classes (MSE)
  double test_loss = -1;
};

// Reported after every mini-batch, and once more after each evaluation (with `eval`).
struct Progress {
  int epoch = 0;
  int64_t step = 0, steps = 0;           // within the epoch
  double loss = 0;                       // last mini-batch (last-stage ranks)
  double grad_norm = NAN;                // its gradient norm, when clipping (MinibatchDone)
  double samples_per_second = 0;
  double wall_seconds = 0;               // since training began
  // The one rank whose loss and evaluations are the run's: the last stage's, for the
  // first micro-batch.
  bool reports = false;
  const EvalPoint* eval = nullptr;
};

struct RankResult {
  int rank = 0;
  std::vector<int> stages;
  bool last_stage = false;
  double final_loss = 0;
  // Per mini-batch of this start, the gradient norm clipped by (MinibatchDone; empty
  // without clipping).
  std::vector<double> grad_norms;
  double test_accuracy = -1;             // -1 when not evaluated (or not a last stage)
  double test_loss = -1;
  std::vector<EvalPoint> history;        // last-stage ranks, when evaluating
  int64_t samples = 0;                   // trained samples
  double train_seconds = 0;              // inside training steps (excludes evaluation)
  double busy_seconds = 0;               // compute (F, B, I, W, STEP) inside those steps
  double allreduce_seconds = 0;          // in ALLREDUCE actions: the replicas' gradients
  double wait_seconds = 0;               // blocked on messages inside those steps
  int64_t actions_run = 0;               // of its Programs inside those steps, messages included
  // Inside those steps, the training thread's time ready to run while other threads held
  // every core, and its time on a core (util::threadCoreTime); -1 where the kernel does
  // not say.
  double core_wait_seconds = 0;
  double core_run_seconds = 0;
  // How fast its core computed meanwhile, as a profile measures it (runtime/core_probe.h):
  // the median over probes between steps, at most one every half second; 0 off the CPU.
  double probe_seconds = 0;
  int64_t peak_memory_bytes = 0;         // the process's peak resident set
  std::string device;                    // where the rank computed (describeDevice)
  std::string data_channel;              // what carried its messages (DataChannel::name)
  std::string heap;                      // the allocator that served its malloc (util::heapName)
  bool sums_in_shared_memory = false;    // and its sums (DataChannel::sumsInSharedMemory)
  // On a GPU: the most bytes LibTorch's caching allocator held allocated at once during
  // training (-1 on the CPU, where peak_memory_bytes tells).
  int64_t peak_device_memory_bytes = -1;
  // Its resident set as trainRank began (LibTorch and the libraries loaded, no model
  // yet): the peak less this is what the model and its training added.
  int64_t start_memory_bytes = 0;
  // What opening the datasets added to its resident set (-1: it loads none).
  int64_t data_memory_bytes = -1;
  // The heap's freed and kept memory once training ended (util::heapFreeBytes; -1 off
  // glibc): part of the peak the tensors' accounting does not hold.
  int64_t heap_free_bytes = -1;
  int weight_versions = 1;               // peak versions of any of the rank's stages (measured)
  int64_t weight_bytes = 0;              // peak bytes of weight copies: versions and extra buffers
  int max_sends_held = 0;                // outgoing messages kept alive at once (executor.h)
  // Per mini-batch of the steady state (action_seconds' warm-up left out), the latest
  // kPacedMinibatches in order, the same mini-batches on every rank: its compute as
  // busy_seconds counts it, and the training thread's time on a core meanwhile. A
  // synchronous step waits for its slowest replica mini-batch by mini-batch
  // (job::slowestReplicaSeconds).
  static constexpr std::size_t kPacedMinibatches = 1024;
  std::vector<double> minibatch_busy_seconds;
  std::vector<double> minibatch_busy_cpu_seconds;
  // Its latest mini-batches (up to kRecentMinibatches), oldest first: the measured
  // timeline draws the typical one (trace::typicalMinibatch).
  std::vector<std::vector<trace::TimedAction>> recent_steps;
  static constexpr std::size_t kRecentMinibatches = 9;
  // Per stage and kind of action timed (F, B, I, W, STEP, ALLREDUCE): the mean duration
  // over the run's steady state, what `train` prices the stages at when it predicts the
  // run from its measured stage times. One mini-batch (of recent_steps) is too few: single
  // mini-batches of one run differed by up to 20% on this machine.
  struct ActionSeconds {
    int stage = 0;
    schedule::ActionType type = schedule::ActionType::F;
    double seconds = 0;
    double cpu_seconds = 0;  // the thread's time on a core (RunResult::action_cpu_seconds)
  };
  std::vector<ActionSeconds> action_seconds;
  std::vector<int64_t> stage_output_bytes;  // per stage, what one micro-batch sends its consumers
  std::vector<std::vector<int>> stage_preds;  // per stage, the stages it reads (the plan's stage DAG)
  std::vector<int64_t> stage_param_bytes;   // per stage
  std::vector<torch::Tensor> parameters; // the trained parameters of this rank's stages
};

// The model a run names: the zoo's `name` built from `config` and `seed`, or the
// TorchScript file `model_file` (its input shape and loss read off the data file, which
// it then needs). Every model a run uses comes from here.
models::Model openModel(const std::string& name, const models::ModelConfig& config, uint64_t seed,
                        const std::string& model_file, const data::DataOptions& data);
models::Model openModel(const TrainConfig& config);

// Refuses numbers and options that cannot go together (epochs, optimizer, learning
// rate, --export without --model-file, checkpoint intervals) with a message naming the
// option.
void checkNumbers(const TrainConfig& config);

// What a checkpoint of this run records, and a resumed run must share (checkpoint.h).
checkpoint::Identity identityOf(const TrainConfig& config);

// Checks the config's numbers and its plan against the model and the job's size before
// any training, with messages that say what to change, and returns the validated
// one-mini-batch Program: the launcher's check (trainRank makes the same checks).
// `model` is the config's (openModel), opened once by the caller.
schedule::Program checkConfig(const TrainConfig& config, const models::Model& model, int world_size);

// The recipe's options (recipe/recipe.h) and the no-decay rule against `model`'s
// parameter names (a rule that exempts none of them is refused): an Error naming the
// option. checkConfig runs it too; a launcher runs it first, before any profiling.
void checkRecipe(const TrainConfig& config, const models::Model& model);

// The model's layers (indices, in the model's order) that each stage of the plan runs.
// Throws Error naming the stage and layer when a layer is unknown, in two stages or in
// none; plan::validate checks that the stages are convex.
std::vector<StageLayers> stageLayers(const plan::Plan& plan, const models::Model& model);

// What a plan's schedule options mean to the executor.
LatestWeightCorrections correctionsOf(const plan::ScheduleOptions& schedule);

// `probe`, when set, is handed to the executor (PipelineExecutor::setWeightProbe).
// The Program's messages and gradient buckets go over `data`; everything the ranks agree
// on besides (sizes, totals, the clock, checkpoints) over `coordinator`.
RankResult trainRank(const TrainConfig& config, DataChannel& data, Coordinator& coordinator,
                     const std::function<void(const Progress&)>& on_progress = {},
                     const PipelineExecutor::WeightProbe& probe = {});
// Both over one transport.
RankResult trainRank(const TrainConfig& config, Transport& transport,
                     const std::function<void(const Progress&)>& on_progress = {},
                     const PipelineExecutor::WeightProbe& probe = {});

// The same training in one process, without pipelining: the reference the synchronous
// schedules must match. Returns the model after config.max_steps_per_epoch optimizer
// steps of epoch 0.
models::Model trainReference(const TrainConfig& config);

// The single-process reference of any schedule's staleness rule: epoch 0's Program
// (config.max_steps_per_epoch mini-batches) replayed micro-batch by micro-batch in one
// process, each forward and backward pass of each stage at exactly the weight version
// the Program names (the current one where it reads the latest), each stage stepping
// when its Program steps, on the mean gradient of the micro-batches that STEP combines.
// PipeMare's T1 and T2 apply as the executor applies them (runtime/staleness_replay.h).
models::Model trainStalenessReference(const TrainConfig& config);

}  // namespace pipetrain::runtime
