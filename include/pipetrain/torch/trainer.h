// Training on one rank: the epoch loop around PipelineExecutor. Every rank runs
// trainRank() with the same config; the data order, the model's initial weights and the
// stage split agree across ranks without further coordination (the split is decided by
// rank 0 and sent to the others).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pipetrain/schedule/program.h"
#include "pipetrain/torch/data.h"
#include "pipetrain/torch/executor.h"
#include "pipetrain/torch/models.h"
#include "pipetrain/torch/transport.h"

namespace pipetrain::runtime {

struct TrainConfig {
  std::string model = "fmnist-cnn";
  models::ModelConfig model_config;
  data::DataOptions data;                // name, paths, seed for synthetic data
  std::string schedule = "1f1b";         // synchronous schedules only
  int chunks = 1;                        // interleaved: stages per rank
  int microbatches = 8;                  // per mini-batch
  int64_t microbatch_size = 32;
  int epochs = 1;
  int64_t max_steps_per_epoch = -1;      // -1 = the whole epoch
  std::string optimizer = "adam";        // adam | sgd (with momentum)
  double lr = 1e-3;
  double momentum = 0.9;
  uint64_t seed = 0;                     // model initialisation and data order
  std::vector<int> stage_bounds;         // layer boundaries (stages + 1); empty = balanced split
  // Data-parallel replicas per stage (empty = one each; then stages = ranks). Replica k
  // of a stage takes micro-batches k, k + r, ...; the replicas all-reduce gradients
  // before each optimizer step.
  std::vector<int> stage_replicas;
  bool evaluate = true;                  // test accuracy at every epoch end
  int threads = 0;                       // intra-op threads; 0 = leave LibTorch's default
};

struct Progress {
  int epoch = 0;
  int64_t step = 0, steps = 0;           // within the epoch
  double loss = 0;                       // last mini-batch (last-stage ranks)
  double samples_per_second = 0;
};

struct RankResult {
  int rank = 0;
  std::vector<int> stages;
  bool last_stage = false;
  double final_loss = 0;
  double test_accuracy = -1;             // -1 when not evaluated (or not a last stage)
  int64_t samples = 0;                   // trained samples
  double train_seconds = 0;              // inside training steps (excludes evaluation)
  double busy_seconds = 0;               // compute inside those steps
  double wait_seconds = 0;               // blocked on communication inside those steps
  int64_t peak_memory_bytes = 0;         // the process's peak resident set
  std::vector<trace::TimedAction> last_step;  // the final mini-batch, for traces
  std::vector<int> stage_bounds;         // the split every rank used
  std::vector<int64_t> stage_output_bytes;  // per stage, one micro-batch's output
  std::vector<int64_t> stage_param_bytes;   // per stage
  std::vector<torch::Tensor> parameters; // the trained parameters of this rank's stages
};

// Checks the config's numbers and schedule before any training, with messages that say
// what to change, and returns the validated Program every rank runs. Called by
// trainRank; exposed for the launcher.
schedule::Program checkConfig(const TrainConfig& config, int world_size);

RankResult trainRank(const TrainConfig& config, Transport& transport,
                     const std::function<void(const Progress&)>& on_progress = {});

// The same training in one process, without pipelining: the reference the pipelined
// schedules must match. Returns the model after config.max_steps_per_epoch optimizer
// steps of epoch 0.
models::Model trainReference(const TrainConfig& config);

}  // namespace pipetrain::runtime
