// Users' CSV schedules: PyTorch's two notations, files with their own communication,
// positions in every error, and the comparison with pipetrain's generators.
#include "pipetrain/schedule/csv_schedule.h"

#include <gtest/gtest.h>

#include <regex>

#include "../expect_error.h"

#include "pipetrain/schedule/program_check.h"
#include "pipetrain/schedule/schedules.h"
#include "pipetrain/util/error.h"

namespace pipetrain::schedule {
namespace {

using testing::expectError;

Program built(const std::string& name, int ranks, int microbatches) {
  ScheduleSpec spec;
  spec.name = name;
  spec.microbatches = microbatches;
  spec.chunks = name == "interleaved" ? 2 : 1;
  return buildProgram(spec, chainDag(ranks * stagesPerRank(traits(name), spec.chunks)));
}

// A lowered Program as PyTorch's compute-plus-communication CSV: every action but the
// STEPs, without weight versions.
std::string withCommunication(const Program& p) {
  std::string csv;
  for (const auto& actions : p.ranks) {
    std::vector<Action> kept;
    for (Action a : actions)
      if (a.type != ActionType::STEP) {
        a.version = -1;
        kept.push_back(a);
      }
    std::string row;
    for (const std::string& cell : toStrings(kept)) row += (row.empty() ? "" : ",") + cell;
    csv += row + "\n";
  }
  return csv;
}

// PyTorch's older notation: the full backward is BW, the input-gradient pass B.
std::string olderNotation(const std::string& csv) {
  std::string out = std::regex_replace(csv, std::regex("(\\d)B(\\d)"), "$1BW$2");
  return std::regex_replace(out, std::regex("(\\d)I(\\d)"), "$1B$2");
}

TEST(CsvSchedule, ReadsPyTorchsOlderNotation) {
  for (const char* name : {"1f1b", "zb-h1", "zb-v"}) {
    const std::string csv = toCsv(built(name, 2, 4));
    const CsvSchedule current = readCsvSchedule(csv, "current.csv");
    const CsvSchedule older = readCsvSchedule(olderNotation(csv), "older.csv");
    EXPECT_EQ(current.notation, BackwardNotation::kCurrent) << name;
    EXPECT_EQ(older.notation, BackwardNotation::kOlder) << name;
    EXPECT_EQ(toText(older.program), toText(current.program)) << name;
    EXPECT_NO_THROW(validateCsvSchedule(older)) << name;
  }
  // A B and a W of one micro-batch, without any BW, is the older notation too.
  EXPECT_EQ(readCsvSchedule("0F0,0B0,0W0\n", "zb.csv").notation, BackwardNotation::kOlder);
  expectError([] { readCsvSchedule("0F0,0I0,0W0,0F1,0BW1\n", "mixed.csv"); },
              {"mixed.csv: line 1, column 2: 0I0 is PyTorch's current notation", "line 1, column 5 uses its older one"});
}

TEST(CsvSchedule, ReadsCommunicationAsLoweringWouldPlaceIt) {
  for (const char* name : {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipev"}) {
    const Program ours = built(name, 3, 6);
    const CsvSchedule read = readCsvSchedule(withCommunication(ours), "comms.csv");
    EXPECT_TRUE(read.gave_communication) << name;
    EXPECT_EQ(read.late_sends, 0) << name;
    EXPECT_EQ(toText(read.program), toText(ours)) << name;
    EXPECT_NO_THROW(validateCsvSchedule(read)) << name;
  }
}

TEST(CsvSchedule, KeepsLateSendsAndMovesEarlyReceivesToTheirConsumer) {
  // Rank 0 sends micro-batch 0's activation only after computing micro-batch 1; rank 1
  // posts both receives up front, as PyTorch's files do.
  const CsvSchedule read = readCsvSchedule(
      "0F0,0F1,0SEND_F0,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
      "1RECV_F0,1RECV_F1,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n",
      "late.csv");
  EXPECT_EQ(read.late_sends, 1);
  EXPECT_NO_THROW(validateCsvSchedule(read));
  EXPECT_EQ(toText(read.program),
            "rank 0: 0F0v0 0F1v0 0SEND_F0>1 0SEND_F1>1 0RECV_B0<1 0B0v0 0RECV_B1<1 0B1v0 0STEPv1\n"
            "rank 1: 1RECV_F0<0 1F0v0 1B0v0 1SEND_B0>0 1RECV_F1<0 1F1v0 1B1v0 1SEND_B1>0 1STEPv1\n");
}

TEST(CsvSchedule, CommunicationThatDisagreesWithTheComputeIsRefusedWithItsPosition) {
  const std::string good =
      "0F0,0SEND_F0,0RECV_B0,0B0\n"
      "1RECV_F0,1F0,1B0,1SEND_B0\n";
  EXPECT_NO_THROW(readCsvSchedule(good, "ok.csv"));
  expectError([] { readCsvSchedule("0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0\n", "m.csv"); },
              {"m.csv: rank 1 lacks 1SEND_B0>0"});
  expectError([] { readCsvSchedule("0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1RECV_F0,1B0,1SEND_B0\n", "r.csv"); },
              {"r.csv: line 2, column 2: 1RECV_F0<0 comes after 1F0"});
  expectError([] { readCsvSchedule("0SEND_F0,0F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n", "s.csv"); },
              {"s.csv: line 1, column 1: 0SEND_F0>1 sends before"});
  // Stages 1 and 2 share rank 1 in a V: nothing travels between them.
  std::string v = withCommunication(built("zb-v", 2, 4));
  v.insert(v.find('\n') + 1, "1SEND_F0>2,");
  expectError([&] { readCsvSchedule(v, "v.csv"); }, {"v.csv: line 2, column 1: 1SEND_F0>2 is no message of this schedule"});
}

TEST(CsvSchedule, ValidatorFindingsNameTheCell) {
  // Rank 1 wants micro-batch 1 first; rank 0 will not send it before B0 returns. Each
  // rank receives in the order the other sends (passes.h), so rank 0 waits for B1's
  // gradient first, and rank 1 for micro-batch 1 after micro-batch 0.
  const CsvSchedule deadlock = readCsvSchedule("0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n", "d.csv");
  expectError([&] { validateCsvSchedule(deadlock); },
              {"rank 0 waits at action 2 (0RECV_B1<1, for 0B1 at line 1, column 4)",
               "rank 1 waits at action 1 (1RECV_F1<0, for 1F1 at line 2, column 1)"});
  const CsvSchedule order = readCsvSchedule("0F1,0B0,0F0,0B1\n", "o.csv");
  expectError([&] { validateCsvSchedule(order); }, {"(0B0v0, line 1, column 2)"});
}

TEST(CsvSchedule, SaysWhichGeneratorItMatches) {
  for (const char* name : {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "dualpipev"}) {
    const std::optional<GeneratorMatch> match = closestGenerator(readCsvSchedule(toCsv(built(name, 4, 8)), "x.csv").program);
    ASSERT_TRUE(match) << name;
    EXPECT_EQ(match->identical_ranks, 4) << name;
    EXPECT_EQ(match->first_difference, "") << name;
  }
  // DualPipeV with rank 3's first two actions swapped after the warm-up.
  Program p = built("dualpipev", 4, 8);
  std::string csv = toCsv(p);
  const std::size_t row3 = csv.rfind('\n', csv.size() - 2) + 1;
  const std::string swapped = csv.substr(0, row3) + "4F0,3F0," + csv.substr(row3 + 8);
  ASSERT_EQ(csv.substr(row3, 8), "3F0,4F0,");
  const std::optional<GeneratorMatch> near = closestGenerator(readCsvSchedule(swapped, "near.csv").program);
  ASSERT_TRUE(near);
  EXPECT_EQ(near->name, "dualpipev");
  EXPECT_EQ(near->identical_ranks, 3);
  EXPECT_NE(near->first_difference.find("rank 3, action 0: 4F0 3F0"), std::string::npos) << near->first_difference;
}

}  // namespace
}  // namespace pipetrain::schedule
