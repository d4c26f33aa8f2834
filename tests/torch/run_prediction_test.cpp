// job::predictRun: a run's measured stage times, simulated as the plan ran them.
#include "pipetrain/job/run_prediction.h"
#include "pipetrain/job/local_cluster.h"

#include <gtest/gtest.h>

#include "pipetrain/plan/plan_program.h"

namespace pipetrain::job {
namespace {

using schedule::ActionType;

// One stage of three layers on one rank, 4 micro-batches under 1F1B.
plan::Plan oneStage() {
  plan::ScheduleOptions schedule;
  schedule.name = "1f1b";
  return plan::chainPlan({"a", "b", "c"}, {0, 3}, {}, schedule, /*microbatch_size=*/2, /*microbatches=*/4);
}

// `plan` (oneStage's) measured at F 1 ms, B 3 ms and a 2 ms step.
MeasuredRun measuredOneStage(const plan::Plan& plan) {
  MeasuredRun run;
  run.plan = &plan;
  run.action_seconds = {{{0, ActionType::F}, 1e-3}, {{0, ActionType::B}, 3e-3}, {{0, ActionType::STEP}, 2e-3}};
  run.action_cpu_seconds = run.action_seconds;
  run.stage_output_bytes = {64};
  run.stage_param_bytes = {1024};
  run.stage_preds = {{}};
  return run;
}

// `plan` (two stages on two ranks) measured at F 1 ms and B 3 ms on each, with `cut_bytes`
// crossing from the first to the second.
MeasuredRun measuredTwoStages(const plan::Plan& plan, int64_t cut_bytes) {
  MeasuredRun run;
  run.plan = &plan;
  run.action_seconds = {
      {{0, ActionType::F}, 1e-3}, {{0, ActionType::B}, 3e-3}, {{1, ActionType::F}, 1e-3}, {{1, ActionType::B}, 3e-3}};
  run.action_cpu_seconds = run.action_seconds;
  run.stage_output_bytes = {cut_bytes, 0};
  run.stage_param_bytes = {0, 0};
  run.stage_preds = {{}, {0}};
  return run;
}

// A mini-batch takes 4 x 4 + 2 ms, whatever recomputes.
sim::Evaluation predicted(int recompute_layers, bool recompute) {
  plan::Plan plan = oneStage();
  plan.stages[0].recompute = recompute;
  plan.stages[0].recompute_layers = recompute_layers;
  return predictRun(measuredOneStage(plan));
}

// A recomputing stage's measured B already holds its forward pass run again: the
// prediction does not add it a second time.
TEST(PredictRun, ARecomputingStageIsPricedAtItsMeasuredTimes) {
  for (const auto& [layers, recompute] : {std::pair{0, false}, std::pair{0, true}, std::pair{2, true}}) {
    SCOPED_TRACE("recompute " + std::to_string(recompute) + ", layers " + std::to_string(layers));
    EXPECT_NEAR(predicted(layers, recompute).report.iteration_time, 4 * 4e-3 + 2e-3, 1e-9);
  }
}

// What a run measured of the runtime's own time per action is priced on each action,
// less its sends' host cost, which the routes price already: one rank's 9 actions
// (4 F, 4 B and a STEP) at 0.1 ms more each; two ranks, where rank 0's sends already
// cost at least what it measured, are priced as without it.
TEST(PredictRun, TheRuntimesOwnTimeIsPricedBeyondTheSends) {
  const plan::Plan plan = oneStage();
  MeasuredRun run = measuredOneStage(plan);
  const double plain = predictRun(run).report.iteration_time;
  run.framework_seconds_per_action = {1e-4};
  EXPECT_NEAR(predictRun(run).report.iteration_time, plain + 9 * 1e-4, 1e-9);
  EXPECT_EQ(runtimeSecondsPerAction(run), std::vector<double>{1e-4});  // what the profile learns

  plan::Plan two = plan::chainPlan({"a", "b"}, {0, 1, 2}, {}, plan.schedule, 2, 4);
  run = measuredTwoStages(two, 64 << 20);  // a send's host cost here: milliseconds
  const double without = predictRun(run).report.iteration_time;
  run.framework_seconds_per_action = {1e-6, 0};
  EXPECT_NEAR(predictRun(run).report.iteration_time, without, 1e-12);
  EXPECT_EQ(runtimeSecondsPerAction(run), (std::vector<double>{0, 0}));
}

// What runs of a model measured of the runtime's own time per action (the profile's
// graph::LearnedActionOverhead) prices every local rank instead of the constant.
TEST(LocalCluster, ALearnedActionOverheadPricesEveryRank) {
  const cluster::ClusterSpec learned = localCluster(3, int64_t{1} << 30, 2, LocalSums::kSharedMemory, false, 5e-6);
  ASSERT_EQ(learned.devices().size(), 3u);
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(learned.device(d).action_overhead, 5e-6);
    EXPECT_EQ(learned.device(d).action_overhead_share, 0.0);  // what runs measured holds it all
  }
  const cluster::ClusterSpec constant = localCluster(3, int64_t{1} << 30, 2, LocalSums::kSharedMemory);
  EXPECT_GT(constant.device(0).action_overhead, 5e-6);
  EXPECT_GT(constant.device(0).action_overhead_share, 0.0);
}

// CPU ranks with a core each wander, and their replicas wait for the last at each
// all-reduce; ranks taking turns on the cores are priced by the turns, GPUs as steady.
TEST(LocalCluster, CpuRanksWithACoreEachWander) {
  for (const double learned : {-1.0, 5e-6}) {  // the constant time per action, or a learned one
    const auto jitter = [&](int ranks, LocalSums sums, bool gpus) {
      return localCluster(ranks, int64_t{1} << 30, 2, sums, gpus, learned).device(1).compute_jitter;
    };
    EXPECT_GT(jitter(2, LocalSums::kSharedMemory, false), 0);
    EXPECT_EQ(jitter(3, LocalSums::kSharedMemory, false), 0);
    EXPECT_EQ(jitter(2, LocalSums::kGloo, true), 0);
  }
}

// A run across hosts prices its messages on the network the job measured between them,
// not on this machine's loopback: two stages, 64 MiB across the cut, hosts joined at
// 100 MB/s (a message there takes 0.67 s; over loopback, about 20 ms).
TEST(PredictRun, ARunAcrossHostsPricesItsMessagesOnTheirLinks) {
  plan::ScheduleOptions schedule;
  schedule.name = "1f1b";
  const plan::Plan plan = plan::chainPlan({"a", "b"}, {0, 1, 2}, {}, schedule, 2, 2);
  MeasuredRun run = measuredTwoStages(plan, 64 << 20);
  const double loopback = predictRun(run).report.iteration_time;
  std::vector<cluster::Device> devices(2);
  for (int d = 0; d < 2; ++d) {
    devices[d].name = plan::rankDeviceNames(plan)[d];
    devices[d].memory_bytes = int64_t{1} << 30;
  }
  const cluster::ClusterSpec hosts(devices, {cluster::Level{"network", 2, 100e6, 50e-6, {}}}, {}, "hosts");
  run.hosts = &hosts;
  const double across = predictRun(run).report.iteration_time;
  EXPECT_LT(loopback, 0.2);
  EXPECT_GT(across, 2 * (64 << 20) / 100e6);  // at least an activation there and its gradient back
}

// A run that summed its replicas' gradients in shared memory is priced at those sums'
// rates, not Gloo's: one stage on 2 replicas with 4 MiB of weights.
TEST(PredictRun, SumsArePricedAtTheChannelThatRanThem) {
  EXPECT_EQ(localSums("auto", /*gpus=*/false), LocalSums::kSharedMemory);
  EXPECT_EQ(localSums("shm", false), LocalSums::kSharedMemory);
  EXPECT_EQ(localSums("gloo", false), LocalSums::kGloo);
  EXPECT_EQ(localSums("auto", /*gpus=*/true), LocalSums::kGloo);

  plan::ScheduleOptions schedule;
  schedule.name = "gpipe";
  plan::Plan plan = plan::chainPlan({"a"}, {0, 1}, {2}, schedule, /*microbatch_size=*/2, /*microbatches=*/2);
  MeasuredRun run;
  run.plan = &plan;
  run.action_seconds = {{{0, ActionType::F}, 1e-3}, {{0, ActionType::B}, 3e-3}, {{0, ActionType::STEP}, 2e-3}};
  run.action_cpu_seconds = run.action_seconds;
  run.concurrent_ranks = 2;
  run.stage_output_bytes = {64};
  run.stage_param_bytes = {4 << 20};
  run.stage_preds = {{}};
  run.sums = LocalSums::kGloo;
  const double gloo = predictRun(run).report.iteration_time;
  run.sums = LocalSums::kSharedMemory;
  const double shm = predictRun(run).report.iteration_time;
  // Gloo: 4 MiB of ring traffic at 0.6 GB/s and two 0.55 ms steps, ~4.6 ms beyond the
  // 6 ms of compute; shared memory: at 6 GB/s and two 15 us steps, ~0.7 ms.
  EXPECT_GT(gloo, 6e-3 + 3e-3);
  EXPECT_LT(shm, 6e-3 + 1.5e-3);
}

// A replicated stage is priced as its slowest replica ran it, all its figures from that
// one (its ALLREDUCE, where the faster replica waits, does not choose it); a stage on
// one rank keeps that rank's figures.
TEST(SlowestReplicaSeconds, AReplicatedStageGoesAtItsSlowestReplicasPace) {
  const RankSeconds fast{{{{0, ActionType::F}, 1e-3}, {{0, ActionType::B}, 2e-3}, {{0, ActionType::ALLREDUCE}, 9e-3}},
                         {}};
  const RankSeconds slow{{{{0, ActionType::F}, 0.9e-3},
                          {{0, ActionType::B}, 2.5e-3},
                          {{0, ActionType::ALLREDUCE}, 1e-3},
                          {{1, ActionType::F}, 4e-3}},
                         {}};
  const RankSeconds alone{{{{2, ActionType::F}, 5e-3}}, {}};
  const plan::StageSeconds expected = {{{0, ActionType::F}, 0.9e-3}, {{0, ActionType::B}, 2.5e-3},
                                       {{0, ActionType::ALLREDUCE}, 1e-3}, {{1, ActionType::F}, 4e-3},
                                       {{2, ActionType::F}, 5e-3}};
  EXPECT_EQ(slowestReplicaSeconds({fast, slow, alone}), expected);
  EXPECT_EQ(slowestReplicaSeconds({slow, fast}), slowestReplicaSeconds({fast, slow}));
  EXPECT_TRUE(slowestReplicaSeconds({}).empty());
}

// Where the replicas take turns lagging, the stage goes at the pace of whichever lags in
// each mini-batch: two replicas of 3 ms a mini-batch on average, each 4 ms in every other
// one, step at 4 ms, 4/3 of either's figures (the ALLREDUCE kept as measured). A stage
// on one rank, or ranks that timed no mini-batch, keep their figures.
TEST(SlowestReplicaSeconds, ReplicasThatTakeTurnsLaggingStepAtTheLaggardsPace) {
  const RankSeconds a{{{{0, ActionType::F}, 1e-3}, {{0, ActionType::B}, 2e-3}, {{0, ActionType::ALLREDUCE}, 1e-3}},
                      {4e-3, 2e-3, 4e-3, 2e-3}};
  const RankSeconds b{{{{0, ActionType::F}, 1e-3}, {{0, ActionType::B}, 2e-3}, {{0, ActionType::ALLREDUCE}, 1e-3}},
                      {2e-3, 4e-3, 2e-3, 4e-3}};
  const plan::StageSeconds paced = slowestReplicaSeconds({a, b});
  EXPECT_NEAR(paced.at({0, ActionType::F}), 4.0 / 3 * 1e-3, 1e-12);
  EXPECT_NEAR(paced.at({0, ActionType::B}), 4.0 / 3 * 2e-3, 1e-12);
  EXPECT_EQ(paced.at({0, ActionType::ALLREDUCE}), 1e-3);
  EXPECT_EQ(slowestReplicaSeconds({a}), a.seconds);
  RankSeconds untimed = b;
  untimed.minibatch_busy.clear();
  EXPECT_EQ(slowestReplicaSeconds({a, untimed}).at({0, ActionType::F}), 1e-3);
}

}  // namespace
}  // namespace pipetrain::job
