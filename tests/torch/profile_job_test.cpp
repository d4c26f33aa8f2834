#include "pipetrain/job/profile_job.h"

#include <gtest/gtest.h>

#include "pipetrain/util/error.h"

namespace pipetrain::job {
namespace {

// A `train` launcher hands each profiling process its share of the job as a file: what it
// writes, the process reads back whole, and a file that is not such a job is refused
// with the key at fault.
TEST(ProfileJob, RoundTripsThroughItsJson) {
  ProfileJob job;
  job.model_file = "model.pt";
  job.model_config = {{"layers", 4}, {"width", 128}};
  job.data.file = "tokens.bin";
  job.data.context = 64;
  job.data.token_dtype = "uint32";
  job.load_data = true;
  job.batches = {4, 8, 32};
  job.options.warmup = 3;
  job.options.repeats = 7;
  job.options.min_repeats = 2;
  job.options.spread = 0.05;
  job.options.optimizer = "sgd";
  job.options.in_flight = 2;
  job.threads = 1;
  job.device = "cuda:0";
  job.precision = "bf16";
  job.share = "1/2";
  job.rendezvous = "/tmp/r";
  job.time_every_layer = true;
  job.out = "graph.json.1";
  const json_io::Json j = profileJobToJson(job);
  EXPECT_EQ(profileJobToJson(profileJobFromJson(j, "job.json")), j);

  json_io::Json typo = j;
  typo["repats"] = 5;
  try {
    profileJobFromJson(typo, "job.json");
    FAIL() << "read a job with an unknown key";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("repats"), std::string::npos) << e.what();
  }
  json_io::Json wrong = j;
  wrong["batches"] = "8";
  EXPECT_THROW(profileJobFromJson(wrong, "job.json"), Error);
}

}  // namespace
}  // namespace pipetrain::job
