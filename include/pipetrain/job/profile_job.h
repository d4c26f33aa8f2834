// `pipetrain profile` as a job: a model's per-layer costs at one or several batch sizes,
// measured in this process, and the layer graph written (docs/profiling.md). src/cli
// parses its flags into a ProfileJob and prints the outcome; `train` starts processes of
// it, one share of the layers each, that meet in a rendezvous folder.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pipetrain/graph/layer_graph.h"
#include "pipetrain/torch/data.h"
#include "pipetrain/torch/models.h"
#include "pipetrain/torch/profiler.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::job {

struct ProfileJob {
  std::string model;       // a zoo model, or
  std::string model_file;  // a TorchScript file
  models::ModelConfig model_config;
  // What the first stage loads (and a model file's input shape); load_data: loading a
  // batch of it is timed into the first reading layer's forward pass.
  data::DataOptions data;
  bool load_data = false;
  std::string data_dir;  // where a named dataset's files are ("" = its package's folder)
  // The profile's batch, then other sizes to time the layers at (the graph's other_batches).
  std::vector<int64_t> batches;
  profiler::ProfileOptions options;
  int threads = 0;  // a rank's cores: BLAS threads; 0 = LibTorch's and BLAS's defaults
  std::string device = "cpu";
  std::string precision = "fp32";
  std::string share;       // "K/P": time share K of P (ProfileOptions::share); "" = all
  std::string rendezvous;  // with a share: the folder the shares' processes meet in
  bool time_every_layer = false;
  std::string out;  // the layer graph JSON written
};

struct ProfileOutcome {
  graph::LayerGraph graph;
  int timed_passes = 0;             // of the first batch size's profile, the graph's
  profiler::ThreadSpeedup speedup;  // where one process timed the whole model on several threads
  int share = 0, shares = 1;        // the share of the layers timed, of how many
};

// The job as JSON, the one form in which a `train` launcher hands its profiling
// processes their part (`pipetrain profile --job FILE`): what to measure, not how to show
// it. The reader refuses unknown keys and wrong types, naming `origin` and the key.
json_io::Json profileJobToJson(const ProfileJob& job);
ProfileJob profileJobFromJson(const json_io::Json& j, const std::string& origin);

// Each pass's progress, with the batch size being timed.
using ProfileProgressFn = std::function<void(const profiler::ProfileProgress&, int64_t batch)>;

// Measures, writes `job.out` and returns what it measured. Throws Error naming the
// option at fault for a bad batch list, share or rendezvous, before any model is built.
ProfileOutcome runProfileJob(ProfileJob job, const ProfileProgressFn& progress = {});

}  // namespace pipetrain::job
