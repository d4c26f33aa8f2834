// What a rank tells its launcher (job/rank_report.h): each line read back as written,
// and a result that lost a field refused naming it.
#include <gtest/gtest.h>

#include "pipetrain/job/rank_report.h"
#include "pipetrain/util/error.h"

namespace pipetrain::job {
namespace {

runtime::RankResult sampleResult() {
  runtime::RankResult r;
  r.rank = 2;
  r.stages = {1, 3};
  r.last_stage = true;
  r.final_loss = 0.25;
  r.test_accuracy = 0.875;
  r.test_loss = 0.5;
  r.history = {{1, 512, 1.5, 2.0, 0.75, 0.625}, {2, 1024, 3.0, 4.5, 0.875, 0.5}};
  r.samples = 1024;
  r.train_seconds = 3.0;
  r.busy_seconds = 2.0;
  r.allreduce_seconds = 0.125;
  r.wait_seconds = 0.5;
  r.actions_run = 1234;
  r.core_wait_seconds = -1;
  r.core_run_seconds = 2.5;
  r.peak_memory_bytes = 400 << 20;
  r.device = "cpu";
  r.data_channel = "gloo";
  r.heap = "tcmalloc";
  r.peak_device_memory_bytes = -1;
  r.start_memory_bytes = 350 << 20;
  r.data_memory_bytes = 1 << 20;
  r.heap_free_bytes = 12 << 20;
  r.sums_in_shared_memory = true;
  r.weight_versions = 2;
  r.weight_bytes = 3 << 20;
  r.max_sends_held = 4;
  schedule::Action f, w;
  f.stage = w.stage = 1;
  f.microbatch = w.microbatch = 0;
  w.type = schedule::ActionType::W;
  r.recent_steps = {{{f, 0.0, 0.5}, {w, 0.5, 0.75}}, {{f, 1.0, 1.5}}};
  r.action_seconds = {{1, schedule::ActionType::F, 0.01, 0.009}, {3, schedule::ActionType::ALLREDUCE, 0.002, 0.001}};
  r.minibatch_busy_seconds = {0.25, 0.5};
  r.minibatch_busy_cpu_seconds = {0.125, 0.375};
  r.stage_output_bytes = {4096, 8192, 0, 16};
  r.stage_preds = {{}, {0}, {1}, {1, 2}};
  r.stage_param_bytes = {100, 200, 300, 400};
  return r;
}

TEST(RankReport, ResultReadsBackAsWritten) {
  const runtime::RankResult written = sampleResult();
  const json_io::Json json = rankResultToJson(written);
  const runtime::RankResult read = rankResultFromJson(json_io::Json::parse(json.dump()), "rank 2's result");
  EXPECT_EQ(rankResultToJson(read), json);
  EXPECT_EQ(read.stages, written.stages);
  EXPECT_EQ(read.history.size(), 2u);
  EXPECT_EQ(read.history[1].samples, 1024);
  EXPECT_EQ(read.action_seconds[1].type, schedule::ActionType::ALLREDUCE);
  EXPECT_EQ(read.stage_preds, written.stage_preds);
  EXPECT_EQ(read.minibatch_busy_seconds, written.minibatch_busy_seconds);
  EXPECT_EQ(read.minibatch_busy_cpu_seconds, written.minibatch_busy_cpu_seconds);
  ASSERT_EQ(read.recent_steps.size(), 2u);
  EXPECT_EQ(read.recent_steps[0].size(), 2u);
  EXPECT_DOUBLE_EQ(read.core_wait_seconds, -1);
  EXPECT_EQ(read.heap_free_bytes, 12 << 20);
  EXPECT_EQ(read.heap, "tcmalloc");
  EXPECT_TRUE(read.sums_in_shared_memory);
  EXPECT_EQ(read.actions_run, 1234);
}

TEST(RankReport, ResultMissingAFieldIsRefusedNamingIt) {
  json_io::Json json = rankResultToJson(sampleResult());
  json.erase("allreduce_seconds");
  try {
    rankResultFromJson(json, "rank 2's result");
    FAIL() << "a result without allreduce_seconds was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2's result"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("allreduce_seconds"), std::string::npos) << e.what();
  }
  json = rankResultToJson(sampleResult());
  json["action_seconds"][0]["type"] = "X";
  EXPECT_THROW(rankResultFromJson(json, "rank 2's result"), Error);
}

TEST(RankReport, ProgressReadsBackAsWritten) {
  const ProgressReport p{1, 20, 112, 0.364, 20513.5};
  const std::optional<ProgressReport> read = readProgressReport(progressReportLine(p));
  ASSERT_TRUE(read);
  EXPECT_EQ(read->epoch, 1);
  EXPECT_EQ(read->step, 20);
  EXPECT_EQ(read->steps, 112);
  EXPECT_NEAR(read->loss, 0.364, 1e-6);
  EXPECT_NEAR(read->samples_per_second, 20513.5, 1e-3);
  // Anything else a rank prints is passed on, not taken for progress.
  EXPECT_FALSE(readProgressReport("note: something else"));
  EXPECT_FALSE(readProgressReport("PROGRESS 1 2"));
}

}  // namespace
}  // namespace pipetrain::job
