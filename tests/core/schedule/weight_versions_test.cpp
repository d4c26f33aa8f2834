// What each action does to its stage's weight versions (weight_versions.h): where 2BW and
// PipeDream swap a stashed version in, where a STEP copies one aside, where PipeMare's T2
// corrects, and what each costs.
#include "pipetrain/schedule/weight_versions.h"

#include <gtest/gtest.h>

#include <map>

#include "pipetrain/schedule/rank_facts.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/schedule/schedules.h"
#include "program_on_ranks.h"

namespace pipetrain::schedule {
namespace {

// One stage, two micro-batches a mini-batch: 0F0v0 0B0v0 0F1v0 0B1v0 0STEPv1 0F2v0 0B2v0
// 0F3v0 0B3v0 0STEPv2 0F4v1 0B4v1 0F5v1 0B5v1 0STEPv3. From the second mini-batch on,
// every pass reads the version before the current one.
TEST(VersionWork, TwoBwReadsTheStashedVersionFromItsSecondMiniBatchOn) {
  const Program p = programOnRanks("2bw", 1, 2, 3);
  const std::vector<VersionWork> work = versionWork(p, /*t2=*/false)[0];
  ASSERT_EQ(work.size(), p.ranks[0].size());
  int steps = 0;
  for (std::size_t i = 0; i < work.size(); ++i) {
    const Action& a = p.ranks[0][i];
    EXPECT_FALSE(work[i].corrects) << toString(a);
    if (a.type == ActionType::STEP) {
      // The versions STEPs v1 and v2 replace are read later; the last one's is not.
      EXPECT_EQ(work[i].stashes, ++steps < 3) << toString(a);
      EXPECT_FALSE(work[i].reads_stash);
    } else {
      EXPECT_EQ(work[i].reads_stash, a.microbatch >= 2) << toString(a);
      EXPECT_FALSE(work[i].stashes);
    }
  }
  // The executor's stash and this reading are one.
  const RankFacts facts = rankFacts(p, 0);
  for (std::size_t i = 0; i < work.size(); ++i) EXPECT_EQ(facts.positions[i].stash_at_step, work[i].stashes);
}

TEST(VersionWork, SynchronousSchedulesTouchNoVersion) {
  for (const std::string& name : scheduleNames()) {
    if (isAsynchronous(name)) continue;
    const Program p = programOnRanks(name, 2, 4, 2);
    const std::vector<std::vector<VersionWork>> ranks = versionWork(p, /*t2=*/true);
    for (int r = 0; r < p.numRanks(); ++r)
      for (const VersionWork& w : ranks[r])
        EXPECT_FALSE(w.reads_stash || w.corrects || w.stashes) << name << ", rank " << r;
  }
}

// PipeMare keeps one copy: its backward passes read the current version, and under T2
// those whose forward pass read an older one run on the correction.
TEST(VersionWork, PipeMareCorrectsOnlyUnderT2AndOnlyWhatItsForwardPassReadOlder) {
  const Program p = programOnRanks("pipemare", 2, 4, 2);
  int corrected = 0;
  for (int r = 0; r < p.numRanks(); ++r) {
    const std::vector<VersionWork> with = versionWork(p, /*t2=*/true)[r], without = versionWork(p, false)[r];
    std::map<int, int> forward_version;
    for (std::size_t i = 0; i < with.size(); ++i) {
      const Action& a = p.ranks[r][i];
      EXPECT_FALSE(with[i].reads_stash || with[i].stashes || without[i].corrects) << toString(a);
      if (a.type == ActionType::F) forward_version[a.microbatch] = a.version;
      if (a.type == ActionType::B)
        EXPECT_EQ(with[i].corrects, a.version > forward_version.at(a.microbatch)) << toString(a);
      corrected += with[i].corrects;
    }
  }
  EXPECT_GT(corrected, 0);
}

TEST(VersionWork, EachKindOfWorkIsPricedOnce) {
  const StageVersionCosts costs{/*swap=*/1, /*stash=*/10, /*correction=*/100, /*backward_runs=*/3, /*t2_runs=*/2};
  EXPECT_DOUBLE_EQ(versionSeconds(ActionType::F, {true, false, false}, costs), 2);  // in, and back
  EXPECT_DOUBLE_EQ(versionSeconds(ActionType::W, {true, false, false}, costs), 2);
  EXPECT_DOUBLE_EQ(versionSeconds(ActionType::B, {true, false, false}, costs), 6);  // once per call on it
  EXPECT_DOUBLE_EQ(versionSeconds(ActionType::I, {false, true, false}, costs), 2 * (100 + 2));
  EXPECT_DOUBLE_EQ(versionSeconds(ActionType::STEP, {false, false, true}, costs), 10);
  EXPECT_DOUBLE_EQ(versionSeconds(ActionType::F, {}, costs), 0);
}

}  // namespace
}  // namespace pipetrain::schedule
