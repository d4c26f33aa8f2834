// The run's summary and the planner's record: one writer and one reader each, and the
// report page read from what they hold.
#include <algorithm>

#include <gtest/gtest.h>

#include "../expect_error.h"
#include "pipetrain/report/run_page.h"
#include "pipetrain/report/train_summary.h"

namespace pipetrain::report {
namespace {

using json_io::Json;

TrainSummary aRun() {
  TrainSummary s;
  s.model = "gpt";
  s.schedule = "1f1b";
  s.world_size = 2;
  s.final_loss = 2.5;
  s.throughput = 40;
  s.wall_seconds = 12;
  s.samples = 480;
  s.predicted_throughput = 42;
  s.plan.microbatch_size = 4;
  s.plan.microbatches = 4;
  s.plan.stages = {{{"embed", "block0"}, {"dev0"}}, {{"block1", "head"}, {"dev1"}}};
  for (int r = 0; r < 2; ++r) {
    RankSummary& rank = s.ranks.emplace_back();
    rank.rank = r;
    rank.stages = {r};
    rank.bubble_fraction = 0.25;
    rank.peak_memory_bytes = 300 << 20;
    rank.start_memory_bytes = 200 << 20;
    rank.device = "cpu";
    rank.data_channel = "shm";
    rank.weight_versions = 1;
    rank.action_seconds = {{r, "F", 0.01, 0.009}};
    rank.predicted_peak_memory_bytes = 90 << 20;
  }
  s.history = {{1, 480, 10, 11, 0.5, 2.4}};
  s.events = {{3.5, "restart", 2, "ckpt/step-10", "rank 1 failed\nits log"}};
  s.recipe.lr = 3e-4;
  s.test_loss = 2.4;
  PlannerRecord p;
  p.candidates = {"ranked", {"plan", "samples/s"}, {{"1f1b x 2", "42"}}, 0};
  p.notes = {"a note of the planner"};
  p.profile = {"/cache/gpt.json", true, 30, "2026-12-05", 2, 0.1};
  p.planning_seconds = 0.02;
  p.objective = "throughput";
  p.calibration = CalibrationRecord{"/cache/gpt.calibration.json", 7, {2.0, 4096, 0.01, 3, 1, 0, 0}};
  p.chosen.throughput = 41;
  p.chosen.rank_peak_memory_bytes = {90 << 20, 90 << 20};
  p.chosen.rank_process_bytes = {10 << 20, 10 << 20};
  p.links = {{"local", "stages 0 -> 1", 1e6, 0.001}};
  s.planner = p;
  return s;
}

TEST(TrainSummary, RoundTripsThroughItsJson) {
  const Json once = trainSummaryToJson(aRun());
  const TrainSummary back = trainSummaryFromJson(once, "summary.json");
  EXPECT_EQ(trainSummaryToJson(back), once);
  ASSERT_TRUE(back.planner && back.planner->calibration);
  EXPECT_EQ(back.planner->calibration->figures.rules_measured, 3);
  EXPECT_EQ(back.ranks[1].predicted_peak_memory_bytes, 90 << 20);
  EXPECT_FALSE(back.test_accuracy);
  EXPECT_EQ(back.events.front().why, "rank 1 failed\nits log");
}

TEST(TrainSummary, ItsReaderNamesTheFileAndTheField) {
  Json j = trainSummaryToJson(aRun());
  j["format"] = "pipetrain.plan";
  testing::expectError([&] { trainSummaryFromJson(j, "run.json"); }, {"run.json", "pipetrain.train-summary"});
  j = trainSummaryToJson(aRun());
  j["ranks"][1].erase("bubble_fraction");
  testing::expectError([&] { trainSummaryFromJson(j, "run.json"); }, {"run.json", "ranks[1]", "bubble_fraction"});
}

TEST(TrainSummary, ThePageSaysWhatCameBeforeTrainingAndWhatHappenedOnTheWay) {
  const Page page = pageForRun(aRun(), {}, "summary.json");
  std::string before;
  for (const auto& [name, value] : page.facts)
    if (name == "before training") before = value;
  EXPECT_EQ(before,
            "profiling 0.1 s (from the profile cache; measuring it took 30.0 s on 2026-12-05), planning 0.02 s, "
            "calibrating update rules 7.0 s (3 trained, 1 from the cache)");
  const std::string restart = "At 3.5 s: the job restarted from checkpoint ckpt/step-10 (rank 1 failed).";
  EXPECT_NE(std::find(page.notes.begin(), page.notes.end(), restart), page.notes.end());
  ASSERT_EQ(page.tables.size(), 2u);
  EXPECT_EQ(page.tables[1].caption, "ranked");
  // The test loss from the summary's evaluations, where no metrics log was kept.
  ASSERT_FALSE(page.lines.empty());
  EXPECT_EQ(page.lines.front().series[1].points.size(), 1u);
}

}  // namespace
}  // namespace pipetrain::report
