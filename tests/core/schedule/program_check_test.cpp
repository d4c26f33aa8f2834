// The validator catches each kind of broken schedule and says where.
#include "pipetrain/schedule/program_check.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "pipetrain/schedule/csv_schedule.h"
#include "pipetrain/schedule/schedules.h"
#include "pipetrain/util/error.h"

namespace pipetrain::schedule {
namespace {

std::string errorOf(const Program& p) {
  try {
    validate(p);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string errorOfCsv(const std::string& csv) {
  try {
    validate(programFromCsv(csv, "user.csv"));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(ProgramCheck, AcceptsAValidUserCsv) {
  EXPECT_EQ(errorOfCsv("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n"), "");
  // PyTorch writes empty cells for idle slots.
  EXPECT_EQ(errorOfCsv("0F0,0F1,,0B0,0B1\n,1F0,1B0,1F1,1B1\n"), "");
}

TEST(ProgramCheck, OverlappedPairsRoundTripThroughCsv) {
  // DualPipeV as PyTorch writes it: pairs as (0F3;1B2)OVERLAP_F_B, stages 0 and 3 on rank 0.
  ScheduleSpec spec;
  spec.name = "dualpipev";
  spec.microbatches = 4;
  const Program generated = buildProgram(spec, chainDag(4));
  const std::string csv = toCsv(generated);
  EXPECT_TRUE(contains(csv, ")OVERLAP_F_B")) << csv;
  EXPECT_EQ(errorOfCsv(csv), "");
  const Program read = programFromCsv(csv, "dualpipev.csv");
  EXPECT_EQ(toCsv(read), csv);
  EXPECT_EQ(read.stage_ranks[0], read.stage_ranks[3]);
}

TEST(ProgramCheck, AnOverlappedForwardNeedsABackwardBehindIt) {
  Program p = programFromCsv("0F0,0B0\n", "user.csv");
  p.ranks[0][0].overlap_next = true;
  EXPECT_EQ(errorOf(p), "");
  p.ranks[0][1].overlap_next = true;  // B with the flag
  EXPECT_TRUE(contains(errorOf(p), "only a forward pass directly followed by a full backward"));
}

TEST(ProgramCheck, DetectsDeadlockAndNamesTheBlockedRanks) {
  // Rank 1 wants micro-batch 1 first, rank 0 will not send it before B0 returns.
  const std::string e = errorOfCsv("0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n");
  EXPECT_TRUE(contains(e, "deadlocks")) << e;
  EXPECT_TRUE(contains(e, "rank 0 waits")) << e;
  EXPECT_TRUE(contains(e, "rank 1 waits")) << e;
}

TEST(ProgramCheck, DetectsMissingAndDuplicatedPasses) {
  EXPECT_TRUE(contains(errorOfCsv("0F0,0F1,0B0\n1F0,1B0,1F1,1B1\n"), "stage 0, micro-batch 1 needs one B")) ;
  // A CSV that repeats a pass is refused as it is read, naming both cells.
  const std::string dup = errorOfCsv("0F0,0F0,0B0\n");
  EXPECT_TRUE(contains(dup, "user.csv: line 1, column 2")) << dup;
  EXPECT_TRUE(contains(dup, "first scheduled at line 1, column 1")) << dup;
  // The validator finds the same in any Program.
  Program p = programFromCsv("0F0,0B0\n", "user.csv");
  p.ranks[0].insert(p.ranks[0].begin(), p.ranks[0].front());
  std::string twice;
  try {
    validate(p);
  } catch (const Error& e) {
    twice = e.what();
  }
  EXPECT_TRUE(contains(twice, "2 forward passes")) << twice;
}

TEST(ProgramCheck, DetectsBackwardBeforeForwardWithPosition) {
  const std::string e = errorOfCsv("0F1,0B0,0F0,0B1\n");
  EXPECT_TRUE(contains(e, "rank 0, action")) << e;
  EXPECT_TRUE(contains(e, "[0B0v0]")) << e;
  EXPECT_TRUE(contains(e, "comes before the forward pass")) << e;
}

TEST(ProgramCheck, DetectsWeightPassBeforeInputPass) {
  EXPECT_TRUE(contains(errorOfCsv("0F0,0W0,0I0\n"), "must follow its input-gradient pass"));
}

TEST(ProgramCheck, RejectsUnneededCommunicationInCsvAndBadCells) {
  EXPECT_TRUE(contains(errorOfCsv("0F0,0SEND_F0,0B0\n"), "line 1, column 2: 0SEND_F0>1 is no message of this schedule"));
  EXPECT_TRUE(contains(errorOfCsv("0F0,0Q0\n"), "line 1, column 2"));
  EXPECT_TRUE(contains(errorOfCsv("0F0,0B0\n0F1,0B1\n"), "stage 0 appears on rank 0 and rank 1"));
}

TEST(ProgramCheck, DetectsUnmatchedSend) {
  ScheduleSpec spec;
  spec.microbatches = 2;
  Program p = buildProgram(spec, chainDag(2));
  // Drop rank 1's first receive.
  auto& r1 = p.ranks[1];
  r1.erase(r1.begin());
  const std::string e = errorOf(p);
  EXPECT_TRUE(contains(e, "no rank receives this message")) << e;
}

// Sends that overtake each other are fine with tags (Gloo), not with a channel that
// matches by order (NCCL): the second contract names the pair and the first mismatch.
TEST(ProgramCheck, InOrderDeliveryNamesTheFirstOvertakingSend) {
  ScheduleSpec spec;
  spec.name = "gpipe";
  spec.microbatches = 2;
  Program p = buildProgram(spec, chainDag(2));
  EXPECT_NO_THROW(validateInOrderDelivery(p));
  auto& r0 = p.ranks[0];
  auto sendOf = [&](int mb) {
    return std::find_if(r0.begin(), r0.end(),
                        [&](const Action& a) { return a.type == ActionType::SEND_F && a.microbatch == mb; });
  };
  const Action first = *sendOf(0);
  r0.erase(sendOf(0));
  r0.insert(sendOf(1) + 1, first);
  EXPECT_EQ(errorOf(p), "");  // still a valid Program
  try {
    validateInOrderDelivery(p);
    ADD_FAILURE() << "overtaking sends accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_TRUE(contains(m, "rank 0 sends rank 1 its message 1 (0SEND_F1")) << m;
    EXPECT_TRUE(contains(m, "NCCL")) << m;
  }
}

TEST(ProgramCheck, DetectsStashingViolation) {
  ScheduleSpec spec;
  spec.name = "pipedream";
  spec.microbatches = 4;
  Program p = buildProgram(spec, chainDag(2));
  for (Action& a : p.ranks[0])
    if (a.type == ActionType::B && a.microbatch == 2) a.version = 0;  // F2 read version 1
  const std::string e = errorOf(p);
  EXPECT_TRUE(contains(e, "its forward pass read version")) << e;
}

TEST(ProgramCheck, DetectsReadingAVersionNotYetCreated) {
  ScheduleSpec spec;
  spec.microbatches = 2;
  Program p = buildProgram(spec, chainDag(1));
  p.ranks[0][0].version = 3;
  EXPECT_TRUE(contains(errorOf(p), "reads weight version 3 but the stage is at version 0"));
}

TEST(ProgramCheck, DetectsActionOnTheWrongRank) {
  EXPECT_TRUE(contains(errorOfCsv("0F0,1F0,0B0\n1B0\n"), "stage 1 appears on rank 0 and rank 1"));
}

}  // namespace
}  // namespace pipetrain::schedule
