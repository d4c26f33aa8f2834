// Memory accounting from the Program alone: how many micro-batches of activations and
// how many weight versions each rank holds at its peak. A micro-batch of activations
// is counted from its F until its B (or W, under split backward: from its I on with
// what it holds between I and W), weighted by the
// rank's share of the stage (1/v for interleaved chunks). A weight version is held from
// the STEP that creates it until the later of its last reader and its successor's
// creation.
#pragma once

#include <optional>
#include <vector>

#include "pipetrain/schedule/program.h"

namespace pipetrain::schedule {

struct StageFootprint {
  int stage = 0;
  int peak_activations = 0;      // micro-batches of this stage held at once
  int weight_versions = 0;       // peak number of versions of this stage's weights
};

struct RankFootprint {
  double peak_activations = 0;   // in micro-batches of the rank's whole share
  // With the stages' bytes given: the most the activations held at once, and the
  // gradients then live.
  double peak_activation_bytes = 0;
  int weight_versions = 0;       // max over the rank's stages
  std::vector<StageFootprint> stages;
};

// One micro-batch's bytes of a stage, as the walk prices them; 0 = not priced.
struct StageBytes {
  double activations = 0;  // its saved activations, held from its F until its B (or W)
  // What it holds between its I and its W under a split backward instead; unset: the same
  // as `activations`.
  std::optional<double> split_activations;
  // The stage's weight gradients, which training allocates in its first backward pass
  // after a step (B, or W under split backward) and frees at its STEP (it clears them
  // rather than zeroing them): a rank's activations peak before its first backward pass
  // without them. A stage whose gradients live throughout (in all-reduce buckets) is
  // given 0 here and priced apart.
  double gradients = 0;
  // What a B, a split I, or a W of the stage holds at its most beyond what the rank held
  // before it: the bytes peak inside the pass there.
  double backward_peak = 0, input_backward_peak = 0, weight_peak = 0;
};

// With `stage_bytes` (one per stage of the program), the walk also tracks bytes at the
// moment they peak (RankFootprint::peak_activation_bytes); without, only micro-batches
// and weight versions.
std::vector<RankFootprint> accountMemory(const Program& program, const std::vector<StageBytes>& stage_bytes = {});

// Position after which each rank no longer needs weight version v of stage s: for
// every rank, a list of (position, stage, version) in increasing position. Executors
// free a stashed version there.
struct Retirement {
  int position = 0;
  int stage = 0;
  int version = 0;
};
std::vector<std::vector<Retirement>> retirements(const Program& program);

}  // namespace pipetrain::schedule
