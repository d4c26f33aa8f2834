#include "pipetrain/job/rank_spec.h"

#include <gtest/gtest.h>

#include "pipetrain/util/error.h"

namespace pipetrain::job {
namespace {

// A `train` launcher hands each rank it starts the job as a file: what it writes, the
// rank reads back whole (the plan, the recipe, the resolved model and data), and a file
// that is not such a job is refused with the key at fault.
TEST(RankJob, RoundTripsThroughItsJson) {
  TrainRequest r;
  runtime::TrainConfig& c = r.config;
  c.model = "gpt";
  c.model_config = {{"layers", 4}, {"width", 128}};
  c.model_file = "model.pt";
  c.data.file = "tokens.bin";
  c.data.context = 64;
  c.data.token_dtype = "uint32";
  c.data.seed = 7;
  c.data.fortunes_dir = "/tmp/fortunes";
  c.plan = plan::Plan::fromJson(
      {{"format", "pipetrain.plan"},
       {"version", 1},
       {"microbatch_size", 4},
       {"microbatches", 8},
       {"schedule", {{"name", "zb-h1"}}},
       {"stages", {{{"devices", {"rank0"}}, {"layers", {"embed", "block0"}}},
                   {{"devices", {"rank1"}}, {"layers", {"block1", "head"}}}}}},
      "plan");
  c.epochs = 3;
  c.max_steps_per_epoch = 20;
  c.optimizer.name = "adamw";
  c.optimizer.beta2 = 0.95;
  c.optimizer.no_decay = "hf";
  c.lr = 3e-4;
  c.lr_schedule.decay = "step";
  c.lr_schedule.warmup_steps = 10;
  c.lr_schedule.step_size = 5;
  c.lr_schedule.gamma = 0.5;
  c.clip_grad_norm = 1.0;
  c.seed = 11;
  c.evaluate = false;
  c.threads = 1;
  c.device = "cpu";
  c.precision = "bf16";
  c.export_path = "trained.pt";
  c.torch_trace = "torch";
  c.checkpoint_dir = "ckpt";
  c.checkpoint_every = 4;
  c.checkpoint_keep = 3;
  c.resume = "ckpt/step-8";
  r.ranks.nproc = 2;
  r.ranks.cores = 2;
  r.ranks.wire = "shm";
  r.ranks.timeout_seconds = 30;
  r.outputs.log_jsonl = "metrics.jsonl";
  const json_io::Json j = rankJobToJson(r);
  const TrainRequest back = rankJobFromJson(j, "job.json");
  EXPECT_EQ(rankJobToJson(back), j);
  EXPECT_EQ(back.config.optimizer.weightDecay(), c.optimizer.weightDecay());  // adamw's default, resolved
  EXPECT_EQ(back.config.lr_schedule.rate(back.config.lr, 17, 100), c.lr_schedule.rate(c.lr, 17, 100));
  EXPECT_EQ(back.config.plan.toJson(), c.plan.toJson());

  json_io::Json typo = j;
  typo["config"]["epoch"] = 5;
  try {
    rankJobFromJson(typo, "job.json");
    FAIL() << "read a job with an unknown key";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("epoch"), std::string::npos) << e.what();
  }
  json_io::Json wrong = j;
  wrong["config"]["recipe"]["lr"] = "fast";
  EXPECT_THROW(rankJobFromJson(wrong, "job.json"), Error);
  json_io::Json other = j;
  other["format"] = "pipetrain.profile-job";
  EXPECT_THROW(rankJobFromJson(other, "job.json"), Error);
}

}  // namespace
}  // namespace pipetrain::job
