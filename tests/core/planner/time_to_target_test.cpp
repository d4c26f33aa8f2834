#include "pipetrain/planner/time_to_target.h"

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <functional>
#include <set>

#include "../expect_error.h"
#include "pipetrain/plan/plan_program.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/schedule/staleness.h"

namespace pipetrain::planner {
namespace {

// A curve falling linearly from 2 to `final_loss` over `samples`, evaluated 10 times.
LossCurve linear(double final_loss, int64_t samples) {
  LossCurve c;
  for (int i = 0; i <= 10; ++i) {
    c.samples.push_back(samples * i / 10);
    c.loss.push_back(2 + (final_loss - 2) * i / 10.0);
  }
  return c;
}

Calibration twoRules(const LossCurve& other) {
  Calibration c;
  c.samples = 1000;
  c.synchronous_key = "sync b32";
  c.curves["sync b32"] = linear(1.0, 1000);
  c.curves["other"] = other;
  c.repeat = linear(1.02, 1000);
  return c;
}

// Eight equal layers on four devices in one node.
struct FourDevices {
  graph::LayerGraph graph = graph::LayerGraph::uniformChain(8, 1e-3, 1e-3, 1e-3, 4000, 1 << 20);
  cluster::ClusterSpec cluster{{{"d0", "gpu", 1, 1 << 30}, {"d1", "gpu", 1, 1 << 30},
                                {"d2", "gpu", 1, 1 << 30}, {"d3", "gpu", 1, 1 << 30}},
                               {{"node", 4, 1e10, 1e-6}},
                               {}};
};

TEST(LossCurve, ReachesALossWhereItsBestSoFarFirstDoes) {
  LossCurve c{{0, 100, 200, 300}, {2.0, 1.5, 1.8, 1.0}};
  EXPECT_EQ(c.bestSoFar().loss, (std::vector<double>{2.0, 1.5, 1.5, 1.0}));
  EXPECT_DOUBLE_EQ(*c.samplesToReach(1.75), 50);   // interpolated in the first fall
  EXPECT_DOUBLE_EQ(*c.samplesToReach(1.5), 100);
  EXPECT_DOUBLE_EQ(*c.samplesToReach(1.25), 250);  // the rise at 200 does not count
  EXPECT_DOUBLE_EQ(*c.samplesToReach(3.0), 0);
  EXPECT_FALSE(c.samplesToReach(0.5));
  EXPECT_DOUBLE_EQ(c.finalLoss(), 1.0);
}

TEST(Calibration, EfficiencyIsProgressPerSampleAgainstTheSynchronousRule) {
  // Reaches the synchronous rule's final loss in half the samples: twice the progress.
  LossCurve fast = linear(0.0, 1000);
  const Calibration c = twoRules(fast);
  EXPECT_DOUBLE_EQ(c.targetLoss(), 1.0);
  const Efficiency e = *efficiencyOf(c, "other");
  EXPECT_TRUE(e.reached);
  EXPECT_NEAR(e.value, 2.0, 1e-9);
  EXPECT_NEAR(c.noise(), 0.02, 1e-9);  // the repeat lands 2% short: the noise
  EXPECT_NEAR(e.low, 2.0 / 1.02, 1e-9);
  EXPECT_NEAR(e.high, 2.0 * 1.02, 1e-9);
  EXPECT_NEAR(efficiencyOf(c, "sync b32")->value, 1.0, 1e-9);
  EXPECT_FALSE(efficiencyOf(c, "never calibrated"));
}

TEST(Calibration, ARuleShortOfTheTargetGetsTheShareOfTheSamplesItWasWorth) {
  // Ends at 1.5, which the synchronous rule reached after 500 samples: half the progress.
  const Efficiency e = *efficiencyOf(twoRules(linear(1.5, 1000)), "other");
  EXPECT_FALSE(e.reached);
  EXPECT_NEAR(e.value, 0.5, 1e-9);
  // A rule that never got below its start made no progress.
  LossCurve flat = linear(2.0, 1000);
  EXPECT_DOUBLE_EQ(efficiencyOf(twoRules(flat), "other")->value, 0.0);
}

TEST(Calibration, RefusesAYardstickWithoutProgress) {
  Calibration c = twoRules(linear(1.0, 1000));
  c.curves["sync b32"] = linear(2.0, 1000);
  testing::expectError([&] { efficiencyOf(c, "other"); }, {"synchronous", "never fell", "--calibration-seconds"});
}

TEST(Calibration, RoundTripsThroughJsonAndNamesWhatIsWrongInAFile) {
  Calibration c = twoRules(linear(0.5, 1000));
  c.identity = {{"model", "mlp"}};
  c.descriptions["other"] = "pipedream: steps on 1 micro-batch(es) of 32";
  const Calibration back = Calibration::fromJson(c.toJson(), "cal.json");
  EXPECT_EQ(back.toJson(), c.toJson());
  auto broken = [&](const std::function<void(json_io::Json&)>& edit) {
    json_io::Json j = c.toJson();
    edit(j);
    return [j] { Calibration::fromJson(j, "cal.json"); };
  };
  testing::expectError(broken([](json_io::Json& j) { j["rules"][0]["samples"][0] = 5; }),
                       {"cal.json", "rules[0]", "starts at 0"});
  testing::expectError(broken([](json_io::Json& j) { j["rules"][1]["samples"][3] = 1; }), {"cal.json", "increase"});
  testing::expectError(broken([](json_io::Json& j) { j["rules"][0]["loss"].erase(0); }), {"cal.json", "as many"});
  testing::expectError(broken([](json_io::Json& j) { j["synchronous"] = "sync b64"; }), {"cal.json", "sync b64"});
  testing::expectError(broken([](json_io::Json& j) { j["version"] = 9; }), {"cal.json"});
}

UpdateRule ruleOf(const std::string& schedule, const std::vector<int>& bounds, const std::vector<int>& replicas,
                  int64_t microbatch_size, int microbatches) {
  const graph::LayerGraph graph = graph::LayerGraph::uniformChain(8, 1e-3, 1e-3, 1e-3, 4000, 1 << 20);
  std::vector<std::string> names;
  for (const auto& l : graph.layers()) names.push_back(l.name);
  plan::ScheduleOptions options;
  options.name = schedule;
  return updateRuleOf(plan::chainPlan(names, bounds, replicas, options, microbatch_size, microbatches), graph);
}

TEST(UpdateRule, SynchronousPlansOfOneBatchShareARuleAndAsynchronousOnesDependOnTheirDelays) {
  for (const char* schedule : {"gpipe", "1f1b", "zb-h1"}) {
    EXPECT_EQ(ruleOf(schedule, {0, 4, 8}, {}, 16, 4).key, "sync b64") << schedule;
    EXPECT_EQ(ruleOf(schedule, {0, 8}, {2}, 32, 2).key, "sync b64") << schedule;
  }
  // PipeDream: a step per micro-batch; the input stage's gradients one step stale.
  const UpdateRule pipedream = ruleOf("pipedream", {0, 4, 8}, {}, 16, 4);
  EXPECT_FALSE(pipedream.synchronous);
  EXPECT_EQ(pipedream.stage_delays, (std::vector<int>{1, 0}));
  EXPECT_NE(pipedream.key, ruleOf("pipedream", {0, 4, 8}, {}, 32, 2).key);  // fewer, larger steps
  EXPECT_NE(pipedream.key, ruleOf("pipedream", {0, 2, 4, 8}, {}, 16, 4).key);  // deeper, staler
  // ... on one stage it steps per micro-batch without staleness; replicated over the
  // whole mini-batch, it is synchronous SGD.
  const UpdateRule single = ruleOf("pipedream", {0, 8}, {}, 16, 4);
  EXPECT_FALSE(single.synchronous);
  EXPECT_EQ(single.stage_delays, (std::vector<int>{0}));
  EXPECT_EQ(ruleOf("pipedream", {0, 8}, {2}, 32, 2).key, "sync b64");
  // 2BW: every stage's gradient one step stale, stepping per mini-batch.
  const UpdateRule two_bw = ruleOf("2bw", {0, 4, 8}, {}, 16, 4);
  EXPECT_FALSE(two_bw.synchronous);
  EXPECT_EQ(two_bw.stage_delays, (std::vector<int>{1, 1}));
  // PipeMare: its options are part of the rule.
  const UpdateRule pipemare = ruleOf("pipemare", {0, 2, 4, 6, 8}, {}, 32, 2);
  EXPECT_FALSE(pipemare.synchronous);
  EXPECT_GE(pipemare.stage_delays.front(), 1);
  EXPECT_NE(pipemare.key.find("t2=1"), std::string::npos) << pipemare.key;
}

// PipeDream's rule is read off a Program of shorter mini-batches where the plan's are
// long (update_rule.cpp); the oracle here reads it off the plan's own Program.
TEST(UpdateRule, ShortenedProgramGivesTheFullRule) {
  const graph::LayerGraph graph = graph::LayerGraph::uniformChain(8, 1e-3, 1e-3, 1e-3, 4000, 1 << 20);
  std::vector<std::string> names;
  for (const auto& l : graph.layers()) names.push_back(l.name);
  plan::ScheduleOptions options;
  options.name = "pipedream";
  int shapes = 0;
  const std::vector<std::vector<int>> chains{{0, 8}, {0, 4, 8}, {0, 2, 4, 8}, {0, 1, 2, 3, 5, 8}};
  for (const std::vector<int>& bounds : chains)
    for (const int replicas_per_stage : {1, 2, 3})
      for (const bool vertical_sync : {false, true})
        for (const int microbatches : {48, 96}) {
          std::vector<int> replicas(bounds.size() - 1, 1);
          replicas.front() = replicas_per_stage;
          replicas.back() = replicas_per_stage == 3 ? 2 : replicas_per_stage;
          options.vertical_sync = vertical_sync;
          const plan::Plan p = plan::chainPlan(names, bounds, replicas, options, 1, microbatches);
          const schedule::Program full = plan::programForPlan(p, plan::stageDag(p, graph), 4);
          const schedule::StepCombination steps = schedule::stepCombination(full);
          std::vector<int> delays(p.numStages(), 0);
          for (const auto& actions : full.ranks)
            for (const schedule::Action& a : actions)
              if (a.type == schedule::ActionType::F && steps.step_of[a.stage][a.microbatch] >= 0)
                delays[a.stage] = std::max(delays[a.stage], steps.step_of[a.stage][a.microbatch] - 1 - a.version);
          const UpdateRule rule = updateRuleOf(p, graph);
          EXPECT_EQ(rule.stage_delays, delays) << p.microbatches << " micro-batches, stages " << p.numStages();
          EXPECT_EQ(rule.samples_per_step, *std::min_element(replicas.begin(), replicas.end()));
          ++shapes;
        }
  EXPECT_EQ(shapes, 48);
}

// Curves by rule, from a function; the repeat lands 2% short of the yardstick.
struct FakeCalibrator : Calibrator {
  Calibration c;
  std::function<LossCurve(const RuleToCalibrate&)> curve_of;
  std::vector<std::string> measured;
  LossCurve repeat_curve = linear(1.02, 1000);  // the synchronous rule's repeat: a noise of 2%
  explicit FakeCalibrator(std::function<LossCurve(const RuleToCalibrate&)> f) : curve_of(std::move(f)) { c.samples = 1000; }
  Calibration& calibration() override { return c; }
  void measure(const RuleToCalibrate& r, bool repeat) override {
    if (repeat) {
      c.repeat = repeat_curve;
      return;
    }
    measured.push_back(r.rule.key);
    c.curves[r.rule.key] = curve_of(r);
  }
};

ExploreOptions asyncAllowed() {
  ExploreOptions o;
  o.global_batch = 64;
  o.allow_async = true;
  return o;
}

// explore() under the time-to-accuracy objective, its rules from `calibrator`.
Exploration exploreForTarget(const FourDevices& s, ExploreOptions o, Calibrator& calibrator,
                             int max_rules = kMaxCalibratedRules) {
  o.objective = &objectiveNamed("time-to-accuracy");
  return explore(s.graph, s.cluster, o, ObjectiveInputs{[&]() -> Calibrator& { return calibrator; }, max_rules});
}

TEST(UpdateRule, TheSearchKeepsEveryAsynchronousFamilysFastestPlan) {
  FourDevices s;
  FakeCalibrator calibrator([](const RuleToCalibrate&) { return linear(1.0, 1000); });
  std::set<std::string> families;
  for (const Candidate& c : exploreForTarget(s, asyncAllowed(), calibrator).ranked)
    families.insert(c.plan.schedule.name + (c.plan.numStages() == 1 ? " alone" : ""));
  for (const char* name : {"pipedream", "2bw", "pipemare"}) {
    EXPECT_TRUE(families.count(name)) << name;
    EXPECT_TRUE(families.count(std::string(name) + " alone")) << name;
  }
}

TEST(TimeToTarget, ChoosesTheRuleThatReachesTheTargetFirstAndKeepsThroughputsChoice) {
  FourDevices s;
  const ExploreOptions o = asyncAllowed();
  // An asynchronous schedule other than the fastest plan's trains three times as fast
  // per sample; the other asynchronous ones make no progress.
  const plan::Plan fastest = explore(s.graph, s.cluster, o).best().plan;
  const std::string winner = fastest.schedule.name == "2bw" ? "pipemare" : "2bw";
  FakeCalibrator calibrator([&](const RuleToCalibrate& r) {
    return r.rule.synchronous ? linear(1.0, 1000) : r.plan.schedule.name == winner ? linear(-1.0, 1000) : linear(2.0, 1000);
  });
  const Exploration e = exploreForTarget(s, o, calibrator, 100);
  ASSERT_FALSE(calibrator.measured.empty());
  EXPECT_EQ(calibrator.measured.front(), "sync b64");  // the yardstick first
  EXPECT_EQ(std::set<std::string>(calibrator.measured.begin(), calibrator.measured.end()).size(),
            calibrator.measured.size());
  EXPECT_EQ(e.rules_measured, static_cast<int>(calibrator.measured.size()));
  EXPECT_STREQ(e.objective->name(), "time-to-accuracy");
  EXPECT_EQ(e.best().plan.schedule.name, winner);
  EXPECT_NEAR(e.best().to_target->efficiency, 3.0, 1e-9);
  ASSERT_TRUE(e.throughput_choice);
  EXPECT_EQ(e.throughput_choice->plan.toJson(), fastest.toJson());
  // The search's pruning kept the plan an exhaustive search chooses.
  ExploreOptions exhaustive = o;
  exhaustive.prune = false;
  FakeCalibrator again(calibrator.curve_of);
  EXPECT_EQ(exploreForTarget(s, exhaustive, again, 100).best().plan.toJson(),
            e.best().plan.toJson());
  // Predicted seconds: the yardstick's samples / efficiency / throughput, in order.
  double last = 0;
  for (const Candidate& c : e.ranked) {
    ASSERT_TRUE(c.to_target);
    if (!c.to_target->calibrated) continue;
    EXPECT_GE(c.to_target->seconds, last);
    last = c.to_target->seconds;
    if (c.to_target->efficiency > 0) {
      EXPECT_NEAR(c.to_target->seconds, 1000 / c.to_target->efficiency / c.report.throughput, 1e-6);
    }
  }
}

TEST(TimeToTarget, TrainsOnlyTheRulesThatCouldWin) {
  FourDevices s;
  // Every rule trains as the synchronous one does: none can beat the fastest plan by
  // more than its smaller steps allow, so the rules whose bound loses are not trained.
  // (The search prunes by the same bound; exhaustive, it leaves the bound to calibration.)
  FakeCalibrator calibrator([](const RuleToCalibrate&) { return linear(1.0, 1000); });
  ExploreOptions exhaustive = asyncAllowed();
  exhaustive.prune = false;
  const Exploration e = exploreForTarget(s, exhaustive, calibrator, 100);
  EXPECT_GT(e.plans_bounded, 0);
  EXPECT_EQ(e.rules_over_budget, 0);
  const double best = e.best().to_target->seconds;
  const double noise = calibrator.c.noise();
  for (const Candidate& c : e.ranked) {
    const UpdateRule rule = updateRuleOf(c.plan, s.graph);
    // The bound, read off the schedule, is the rule's own: a step per so many samples.
    EXPECT_DOUBLE_EQ(mostProgressPerSample(c.plan), 64.0 / static_cast<double>(rule.samples_per_step)) << rule.key;
    if (rule.synchronous || std::count(calibrator.measured.begin(), calibrator.measured.end(), rule.key)) continue;
    EXPECT_GE(1000 / (mostProgressPerSample(c.plan) * (1 + noise)) / c.report.throughput, best * (1 - 1e-9)) << rule.key;
    EXPECT_FALSE(c.to_target->calibrated) << rule.key;
  }
  // A limit on the rules leaves the others untrained, and says so.
  FakeCalibrator limited([](const RuleToCalibrate& r) { return r.rule.synchronous ? linear(1.0, 1000) : linear(-1.0, 1000); });
  const Exploration l = exploreForTarget(s, asyncAllowed(), limited, 2);
  EXPECT_EQ(limited.measured.size(), 2u);
  EXPECT_GT(l.rules_over_budget, 0);
  // Curves the calibrator holds already are not trained again.
  FakeCalibrator cached([](const RuleToCalibrate&) -> LossCurve { throw Error("trained a cached rule"); });
  cached.c = limited.c;
  const Exploration again = exploreForTarget(s, asyncAllowed(), cached, 2);
  EXPECT_EQ(again.rules_cached, 2);
  EXPECT_EQ(again.best().plan.toJson(), l.best().plan.toJson());
}

TEST(TimeToTarget, WithoutAnAsynchronousAdvantageThroughputDecides) {
  FourDevices s;
  ExploreOptions o = asyncAllowed();
  FakeCalibrator calibrator([](const RuleToCalibrate& r) { return r.rule.synchronous ? linear(1.0, 1000) : linear(1.5, 1000); });
  const Exploration e = exploreForTarget(s, o, calibrator);
  const plan::Plan fastest = explore(s.graph, s.cluster, o).best().plan;
  o.allow_async = false;
  EXPECT_EQ(e.best().plan.toJson(), explore(s.graph, s.cluster, o).best().plan.toJson());
  EXPECT_TRUE(e.best().to_target->reached);
  // Throughput alone would have taken the asynchronous plan where it was the fastest.
  EXPECT_EQ(e.throughput_choice.has_value(), schedule::isAsynchronous(fastest.schedule.name));
}

// An asynchronous rule 1.5x as fast per sample wins where calibration's repeat lands
// within 2% of the yardstick; where the repeat barely moved (a noise of 90%, the
// calibration all plateau), it cannot be told from the synchronous rule, and the fastest
// synchronous plan is chosen, saying why.
TEST(TimeToTarget, AnAsynchronousPlanWithinTheNoiseGivesWayToTheSynchronousOne) {
  FourDevices s;
  auto curves = [](const RuleToCalibrate& r) { return r.rule.synchronous ? linear(1.0, 1000) : linear(0.5, 1000); };
  FakeCalibrator quiet(curves);
  const Exploration sure = exploreForTarget(s, asyncAllowed(), quiet);
  ASSERT_TRUE(schedule::isAsynchronous(sure.best().plan.schedule.name));
  EXPECT_NEAR(sure.best().to_target->efficiency, 1.5, 1e-9);
  FakeCalibrator noisy(curves);
  noisy.repeat_curve = linear(1.9, 1000);
  const Exploration unsure = exploreForTarget(s, asyncAllowed(), noisy);
  EXPECT_NEAR(unsure.calibration_noise, 0.9, 1e-9);
  EXPECT_FALSE(schedule::isAsynchronous(unsure.best().plan.schedule.name));
  ExploreOptions sync_only = asyncAllowed();
  sync_only.allow_async = false;
  EXPECT_EQ(unsure.best().plan.toJson(), explore(s.graph, s.cluster, sync_only).best().plan.toJson());
  ASSERT_FALSE(unsure.ranking_notes.empty());
  EXPECT_NE(unsure.ranking_notes.back().find("within the calibration's noise (+-90%)"), std::string::npos)
      << unsure.ranking_notes.back();
}

TEST(TimeToTarget, NeedsASynchronousYardstick) {
  FourDevices s;
  ExploreOptions o = asyncAllowed();
  o.schedule = "2bw";
  FakeCalibrator calibrator([](const RuleToCalibrate&) { return linear(1.0, 1000); });
  testing::expectError([&] { exploreForTarget(s, o, calibrator); },
                       {"synchronous", "--schedule auto"});
}

TEST(Objective, TheTableNamesEachObjectiveOnceAndRefusesUnknownOnes) {
  EXPECT_EQ(objectiveNames(), (std::vector<std::string>{"throughput", "time-to-accuracy"}));
  EXPECT_EQ(&objectiveNamed("throughput"), &throughputObjective());
  EXPECT_EQ(objectives().front(), &throughputObjective());  // the default
  testing::expectError([] { objectiveNamed("accuracy"); }, {"accuracy", "throughput, time-to-accuracy"});
}

TEST(Objective, AnObjectiveThatNeedsACalibratorRefusesToSearchWithoutOne) {
  FourDevices s;
  ExploreOptions o = asyncAllowed();
  o.objective = &objectiveNamed("time-to-accuracy");
  testing::expectError([&] { explore(s.graph, s.cluster, o); }, {"time-to-accuracy", "no calibrator"});
}

TEST(Objective, TimeToAccuracyWithOnlySynchronousPlansRanksByThroughputAndSaysSo) {
  FourDevices s;
  ExploreOptions o = asyncAllowed();
  o.allow_async = false;
  o.objective = &objectiveNamed("time-to-accuracy");
  bool made = false;  // a calibrator costs: it is not even made
  FakeCalibrator calibrator([](const RuleToCalibrate&) -> LossCurve { throw Error("calibrated a synchronous-only run"); });
  const Exploration e = explore(s.graph, s.cluster, o, ObjectiveInputs{[&]() -> Calibrator& {
                                  made = true;
                                  return calibrator;
                                }});
  EXPECT_FALSE(made);
  EXPECT_STREQ(e.objective->name(), "throughput");
  ExploreOptions throughput = o;
  throughput.objective = &throughputObjective();
  EXPECT_EQ(e.best().plan.toJson(), explore(s.graph, s.cluster, throughput).best().plan.toJson());
  ASSERT_EQ(e.ranking_notes.size(), 1u);
  EXPECT_NE(e.ranking_notes[0].find("--allow-async"), std::string::npos) << e.ranking_notes[0];
}

}  // namespace
}  // namespace pipetrain::planner
