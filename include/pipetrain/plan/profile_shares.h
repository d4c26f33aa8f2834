// Profiles taken in shares: when `train` profiles a model in one process per rank, each
// process times a contiguous share of the layers instead of all of them, so that its
// working set (weights, gradients, optimizer state) is about a pipeline rank's, not the
// whole model's. On this 2-core machine, whole-model profiles put the 2-stage 8 x 1024
// mlp's stages well above what its ranks measured, and profiles in shares near it
// (docs/profiling.md, "Profiled as a rank runs", under "Layers: `pipetrain profile`").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/graph/layer_graph.h"

namespace pipetrain::plan {

// The layers each of `parts` concurrent profiles times: contiguous shares balanced by
// parameter bytes (`param_bytes`, one per layer in order), min(parts, layers) of them.
// Returns the boundaries: share i is [b[i], b[i+1]).
// REQUIRES: parts >= 1 and at least one layer.
std::vector<int> profileShares(const std::vector<int64_t>& param_bytes, int parts);

// The micro-batches each of `parts` profiling processes holds in flight
// (profiler::ProfileOptions::in_flight): the activations rank K of a `parts`-stage chain
// pipeline holds at its peak under `schedule` with `microbatches` per mini-batch
// (schedule::accountMemory), rounded up, at most kMaxProfiledInFlight. A schedule not yet
// chosen ("auto" or empty), or one these numbers do not fit, counts as 1F1B (parts - K).
// REQUIRES: parts >= 1, microbatches >= 1.
std::vector<int> profileInFlight(const std::string& schedule, int parts, int microbatches);
// Every micro-batch in flight multiplies a profiling pass's work; past this many the
// activations of the models here stream far beyond the caches anyway.
constexpr int kMaxProfiledInFlight = 8;

// The share of `shares` a profiling process times, when more processes profile than a
// model has shares: they repeat the shares, so every process still profiles beside the
// others as the ranks will run.
inline int shareOfProcess(int process, int shares) { return process % shares; }

// One process's profiles of one model at several batch sizes (timed one size after the
// other), brought to one core speed: each size's times scaled by the median of the
// sizes' probes over its own (NOTE(core-probe)), and that median its probe. A core that
// slowed while one size was timed made that size look dearer per sample than the sizes
// around it (the race's gpt at 32: docs/profiling.md, "Layers: `pipetrain profile`"), and
// the planner then avoided it. Unchanged where a size has no probe (a GPU's).
std::vector<graph::LayerGraph> sizesAtOneCoreSpeed(std::vector<graph::LayerGraph> sizes);

// One graph from the profiles of one model taken in shares: graphs[i] is the profile whose
// process timed share i of graphs.size() (plan::profileShares over its param_bytes); each
// layer's times come from the profile that timed it, everything else from graphs[0].
// Throws Error when the graphs differ in layers, sizes or batch, naming the first difference.
graph::LayerGraph mergeProfileShares(const std::vector<graph::LayerGraph>& graphs);

}  // namespace pipetrain::plan
