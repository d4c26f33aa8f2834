// Memory accounting from the Program alone matches the published footprints.
#include "pipetrain/schedule/program_memory.h"

#include <gtest/gtest.h>

#include "pipetrain/schedule/schedules.h"

namespace pipetrain::schedule {
namespace {

std::vector<RankFootprint> footprint(const std::string& name, int p, int m, int chunks = 1, int k = 1) {
  ScheduleSpec spec;
  spec.name = name;
  spec.microbatches = m;
  spec.chunks = chunks;
  spec.minibatches = k;
  return accountMemory(buildProgram(spec, chainDag(p * chunks)));
}

TEST(ProgramMemory, OneFOneBHoldsMinOfPMinusRAndM) {
  for (int m : {2, 8}) {
    const auto f = footprint("1f1b", 4, m);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(f[r].peak_activations, std::min(4 - r, m)) << "m=" << m << " r=" << r;
  }
}

TEST(ProgramMemory, GPipeHoldsAllMicrobatches) {
  for (const auto& rank : footprint("gpipe", 4, 8)) EXPECT_EQ(rank.peak_activations, 8);
}

TEST(ProgramMemory, ZeroBubbleH1HoldsPOnEveryRank) {
  for (const auto& rank : footprint("zb-h1", 4, 8)) EXPECT_EQ(rank.peak_activations, 4);
}

TEST(ProgramMemory, InterleavedHoldsPPlusPMinusOneOverV) {
  const int p = 4, v = 2;
  EXPECT_DOUBLE_EQ(footprint("interleaved", p, 8, v)[0].peak_activations, p + (p - 1.0) / v);
}

TEST(ProgramMemory, WeightVersionsPerSchedule) {
  const int p = 4, m = 8;
  for (const std::string name : {"gpipe", "1f1b", "interleaved", "zb-h1"})
    for (const auto& rank : footprint(name, p, m, name == "interleaved" ? 2 : 1, 2))
      EXPECT_EQ(rank.weight_versions, 1) << name;
  const auto pipedream = footprint("pipedream", p, m, 1, 2);
  for (int r = 0; r < p; ++r) EXPECT_EQ(pipedream[r].weight_versions, p - r) << "pipedream rank " << r;
  for (const auto& rank : footprint("2bw", p, m, 1, 3)) EXPECT_EQ(rank.weight_versions, 2);
  for (const auto& rank : footprint("pipemare", p, m, 1, 3)) EXPECT_EQ(rank.weight_versions, 1);
}

// One stage's bytes: its activations, then what a test sets.
StageBytes activations(double bytes) {
  StageBytes b;
  b.activations = bytes;
  return b;
}

double peakBytes(const Program& program, const std::vector<StageBytes>& stages, int rank = 0) {
  return accountMemory(program, stages)[rank].peak_activation_bytes;
}

TEST(ProgramMemory, ActivationBytesFollowTheWalk) {
  ScheduleSpec spec;
  spec.microbatches = 8;
  const Program p = buildProgram(spec, chainDag(2));
  EXPECT_DOUBLE_EQ(peakBytes(p, {activations(100), activations(10)}, 0), 200.0);
  EXPECT_DOUBLE_EQ(peakBytes(p, {activations(100), activations(10)}, 1), 10.0);
}

// Gradients exist from a stage's first backward pass after a step to the step: GPipe's
// activations peak without them, 1F1B's steady state holds both.
TEST(ProgramMemory, GradientsFromTheFirstBackwardToTheStep) {
  ScheduleSpec spec;
  spec.name = "gpipe";
  spec.microbatches = 4;
  const Program gpipe = buildProgram(spec, chainDag(1));  // F F F F B B B B STEP
  StageBytes stage = activations(100);
  stage.gradients = 50;
  EXPECT_DOUBLE_EQ(peakBytes(gpipe, {stage}), 400.0);
  stage.gradients = 350;
  EXPECT_DOUBLE_EQ(peakBytes(gpipe, {stage}), 650.0);  // 3 x 100 + 350
  spec.name = "1f1b";
  const Program one_f_one_b = buildProgram(spec, chainDag(2));
  // Rank 0 holds 2 micro-batches at its peak; after its first B, 2 again with the gradients.
  stage.gradients = 50;
  EXPECT_DOUBLE_EQ(peakBytes(one_f_one_b, {stage, stage}), 250.0);
  EXPECT_DOUBLE_EQ(peakBytes(one_f_one_b, {activations(100), activations(100)}), 200.0);
}

// One stage, two micro-batches: F F I I W W.
Program twoSplitMicrobatches() {
  Program p;
  p.num_stages = 1;
  p.microbatches = 2;
  p.stage_ranks = {{0}};
  p.stage_preds = p.stage_succs = {{}};
  p.ranks = {{computeAction(ActionType::F, 0, 0, 0), computeAction(ActionType::F, 0, 1, 0),
              computeAction(ActionType::I, 0, 0, 0), computeAction(ActionType::I, 0, 1, 0),
              computeAction(ActionType::W, 0, 0, 0), computeAction(ActionType::W, 0, 1, 0)}};
  return p;
}

StageBytes splitAt(double before_i, double from_i_to_w) {
  StageBytes b = activations(before_i);
  b.split_activations = from_i_to_w;
  return b;
}

// A split backward's micro-batch holds its activations until I, then what W reads and the
// gradients kept for it until W (more or less than before: I frees what only it read).
TEST(ProgramMemory, SplitActivationBytesHeldFromIToW) {
  const Program p = twoSplitMicrobatches();
  EXPECT_DOUBLE_EQ(peakBytes(p, {activations(100)}), 200.0);  // as before I
  EXPECT_DOUBLE_EQ(peakBytes(p, {splitAt(100, 150)}), 300.0);  // I adds 50 twice
  EXPECT_DOUBLE_EQ(peakBytes(p, {splitAt(100, 60)}), 200.0);   // I frees
  EXPECT_EQ(accountMemory(p, {splitAt(100, 150)})[0].peak_activations, 2);
}

// A backward pass's transient tensors raise the peak inside it, above what the rank held
// before it: GPipe's B after four Fs, a split I after the other micro-batch's I.
TEST(ProgramMemory, BackwardPassesPeakByTheirTransientTensors) {
  ScheduleSpec spec;
  spec.name = "gpipe";
  spec.microbatches = 4;
  const Program gpipe = buildProgram(spec, chainDag(1));  // F F F F B B B B STEP
  StageBytes stage = activations(100);
  stage.backward_peak = 30;
  EXPECT_DOUBLE_EQ(peakBytes(gpipe, {stage}), 430.0);
  stage.gradients = 50;
  EXPECT_DOUBLE_EQ(peakBytes(gpipe, {stage}), 430.0);
  // The first B peaks before its gradients exist (it allocates them as it ends).
  stage.backward_peak = 150;
  EXPECT_DOUBLE_EQ(peakBytes(gpipe, {stage}), 550.0);
  // An I's transient leaves a whole B alone, and the other way round.
  StageBytes input_only = activations(100);
  input_only.input_backward_peak = 30;
  EXPECT_DOUBLE_EQ(peakBytes(gpipe, {input_only}), 400.0);

  const Program p = twoSplitMicrobatches();
  // The second I starts at 150 + 100 and holds 60 more inside; 40 more stays below the
  // 300 held after both.
  StageBytes split = splitAt(100, 150);
  split.input_backward_peak = 60;
  EXPECT_DOUBLE_EQ(peakBytes(p, {split}), 310.0);
  split.input_backward_peak = 40;
  EXPECT_DOUBLE_EQ(peakBytes(p, {split}), 300.0);
  split = splitAt(100, 150);
  split.backward_peak = 60;
  EXPECT_DOUBLE_EQ(peakBytes(p, {split}), 300.0);
  // The first W starts from both micro-batches' 300, and the second from 150 and the
  // gradients.
  split = splitAt(100, 150);
  split.weight_peak = 50;
  EXPECT_DOUBLE_EQ(peakBytes(p, {split}), 350.0);
  split.gradients = 200;
  EXPECT_DOUBLE_EQ(peakBytes(p, {split}), 400.0);
}

TEST(ProgramMemory, RetirementsComeAfterTheLastReader) {
  ScheduleSpec spec;
  spec.name = "pipedream";
  spec.microbatches = 4;
  const Program p = buildProgram(spec, chainDag(2));
  const auto retired = retirements(p);
  for (int r = 0; r < p.numRanks(); ++r)
    for (const Retirement& ret : retired[r])
      for (int i = ret.position + 1; i < static_cast<int>(p.ranks[r].size()); ++i) {
        const Action& a = p.ranks[r][i];
        EXPECT_FALSE(isCompute(a.type) && a.stage == ret.stage && a.version == ret.version)
            << "rank " << r << " reads retired version at " << i;
      }
}

}  // namespace
}  // namespace pipetrain::schedule
