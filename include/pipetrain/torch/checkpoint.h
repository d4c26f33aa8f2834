// Checkpoints: a training run's state on disk, keyed by layer name rather than by stage,
// so that a checkpoint taken under one plan loads under any other (other stage
// boundaries, stage count, replicas or schedule): each rank reads the layers it runs now,
// wherever they were written.
//
// A checkpoint is a folder `step-<mini-batches>.<run>` of one `rank-<r>.pt` per rank and a
// `manifest.json`. A rank's file (torch.save format) holds, for each layer of the stages
// whose micro-batch-0 replica it runs, the layer's parameters and buffers
// ("<layer>/<name>"), each parameter's optimizer and T2 state
// ("<layer>/<name>#adam.exp_avg", ...) and the stage's optimizer steps
// ("<layer>#steps"); every rank's file also holds its random generator ("#rng"). The
// manifest, written by rank 0 last, records the position in training, the plan, the
// configuration that must not change on resume, every layer's tensors and shapes and the
// file holding them, and each file's size and CRC-32. Every file is written to a
// temporary name, synced and renamed, and the manifest only after every rank's file is
// in place: a folder without a manifest, or whose files do not match it, is not a
// checkpoint, whatever a crash left behind.
//
// What is exact: resuming a synchronous schedule reproduces the uninterrupted run's
// parameters (every mini-batch ends in a flush, so the epoch runs in segments between
// checkpoints unchanged). An asynchronous schedule is checkpointed where its pipeline
// drains, with no weight version in flight: --checkpoint-every N adds a drain every N
// mini-batches, so a resumed run matches an uninterrupted run with the same N exactly
// (and differs from one without checkpoints by those drains).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipetrain/checkpoint/manifest.h"
#include "pipetrain/schedule/program.h"
#include "pipetrain/torch/executor.h"
#include "pipetrain/torch/models.h"
#include "pipetrain/torch/transport.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::runtime {

// One rank's part of a run, as checkpoints see it.
struct RankState {
  int rank = 0;
  models::Model& model;
  const std::vector<StageLayers>& stages;
  const schedule::Program& program;  // any Program of the run's plan
  PipelineExecutor& executor;
};

// A checkpoint found on disk, its manifest read and its files checked.
struct Checkpoint {
  std::string dir;
  checkpoint::Manifest manifest;
};

// `path` is a checkpoint folder, or a folder of them (--checkpoint-dir): then the newest
// whose files match its manifest (older or broken ones are named on stderr when skipped).
// Throws Error naming the file and what is wrong when `path` is a checkpoint that is
// truncated, corrupted or of an unknown format, or holds no intact checkpoint; the
// message names `path` as the user gave it (`given_as`: "--resume", or a command's
// "checkpoint" argument).
Checkpoint findCheckpoint(const std::string& path, const std::string& given_as = "checkpoint");

// What `--resume` resumes from: findCheckpoint(resume), except that a run whose
// --resume is its own --checkpoint-dir starts from the beginning (nullopt) while that
// folder holds no intact checkpoint. So the first start of a job and every restart can
// run one command, as torchrun's --max-restarts and a batch system's requeues do.
std::optional<Checkpoint> checkpointToResume(const std::string& resume, const std::string& checkpoint_dir);

// Throws Error when `from` already ends epoch `epochs` (the run's --epochs): resuming it
// would train nothing, and running the command again would not either.
void checkEpochsLeft(const Checkpoint& from, int epochs);

// Collective: every rank calls it at the same point. Writes the checkpoint of `position`
// under `root`, then (rank 0) removes all but the newest `keep` and any folder a crash
// left without a manifest. `run` names this run's checkpoints apart from another run's
// at the same step; every rank passes the same. Returns the folder written.
std::string saveCheckpoint(const std::string& root, int64_t run, int keep, const checkpoint::Position& position,
                           const checkpoint::Identity& identity, const plan::Plan& plan, const RankState& state,
                           Coordinator& coordinator);

// Loads this rank's layers (weights, buffers, optimizer and T2 state, steps) from
// `checkpoint`, and its random generator when the plan is the checkpoint's. Throws Error
// when the checkpoint is of another model (a layer or tensor missing, or shaped
// otherwise) or another identity, naming what differs.
void loadCheckpoint(const Checkpoint& checkpoint, const checkpoint::Identity& identity, const plan::Plan& plan,
                    const RankState& state);

// Writes every layer's parameters and buffers as one file Python loads: the user's
// TorchScript module (`model_file`, default the one the manifest names) with the
// checkpoint's weights, for torch.jit.load; or, for a zoo model, a dict
// {"<layer>.<name>": tensor} for torch.load. Written atomically.
void exportCheckpoint(const Checkpoint& checkpoint, const std::string& out, const std::string& model_file = "");

}  // namespace pipetrain::runtime
