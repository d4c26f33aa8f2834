#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "pipetrain/trace/chrome_trace.h"
#include "pipetrain/trace/svg_gantt.h"
#include "pipetrain/trace/timeline.h"
#include "pipetrain/trace/timeline_json.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::trace {
namespace {

using schedule::Action;
using schedule::ActionType;

Action act(ActionType type, int stage, int mb, int version = -1) {
  return schedule::computeAction(type, stage, mb, version);
}

// Two ranks, one micro-batch, then an optimizer step and an all-reduce on rank 0.
// Times in seconds: F on rank 0 [0, 1ms), message [1, 1.5)ms, F on rank 1 [1.5, 2.5)...
Timeline twoStages() {
  Timeline t;
  t.title = "tiny, 2 stages";
  t.source = "simulated";
  t.ranks.resize(2);
  t.ranks[0] = {{act(ActionType::F, 0, 0, 0), 0.000, 0.001},
                {act(ActionType::B, 0, 0, 0), 0.0045, 0.0065},
                {act(ActionType::ALLREDUCE, 0, -1), 0.0065, 0.0070},
                {act(ActionType::STEP, 0, -1, 1), 0.0070, 0.0072}};
  t.ranks[1] = {{act(ActionType::F, 1, 0, 0), 0.0015, 0.0025}, {act(ActionType::B, 1, 0, 0), 0.0025, 0.0040}};
  t.transfers = {{schedule::commAction(ActionType::SEND_F, 0, 0, 1), 0, 1, 0.0010, 0.0015, 4096},
                 {schedule::commAction(ActionType::SEND_B, 1, 0, 0), 1, 0, 0.0040, 0.0045, 4096}};
  return t;
}

std::size_t count(const std::string& haystack, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t pos = haystack.find(needle); pos != std::string::npos;
       pos = haystack.find(needle, pos + needle.size()))
    ++n;
  return n;
}

// ---- Timeline ----------------------------------------------------------------------

TEST(Timeline, MakespanIsTheLastEndOfActionsAndTransfers) {
  Timeline t = twoStages();
  EXPECT_DOUBLE_EQ(t.makespan(), 0.0072);
  t.transfers.push_back({schedule::commAction(ActionType::SEND_F, 0, 1, 1), 0, 1, 0.007, 0.009, 1});
  EXPECT_DOUBLE_EQ(t.makespan(), 0.009);  // a late message counts too
  EXPECT_EQ(Timeline{}.makespan(), 0);
}

TEST(Timeline, BusyCountsComputeAndStepButNotAllreduce) {
  const Timeline t = twoStages();
  EXPECT_NEAR(t.busySeconds(0), 0.001 + 0.002 + 0.0002, 1e-12);
  EXPECT_NEAR(t.busySeconds(1), 0.001 + 0.0015, 1e-12);
}

// Mini-batches of two micro-batches each, one rank: F0 B0 F1 B1 ALLREDUCE STEP, then the
// next, each lasting `spans[k]` seconds from `k` seconds on.
std::vector<TimedAction> minibatches(const std::vector<double>& spans) {
  std::vector<TimedAction> out;
  for (std::size_t k = 0; k < spans.size(); ++k) {
    const double t = static_cast<double>(k), d = spans[k] / 6;
    const int mb = 2 * static_cast<int>(k);
    out.push_back({act(ActionType::F, 0, mb), t, t + d});
    out.push_back({act(ActionType::B, 0, mb), t + d, t + 2 * d});
    out.push_back({act(ActionType::F, 0, mb + 1), t + 2 * d, t + 3 * d});
    out.push_back({act(ActionType::B, 0, mb + 1), t + 3 * d, t + 4 * d});
    out.push_back({schedule::allReduceAction(0), t + 4 * d, t + 5 * d});
    out.push_back({schedule::stepAction(0, static_cast<int>(k) + 1), t + 5 * d, t + 6 * d});
  }
  return out;
}

TEST(Timeline, MinibatchesSplitAtTheirFirstMicrobatchAndKeepTheirStep) {
  const auto split = splitMinibatches(minibatches({0.1, 0.2, 0.3}), 2, 0, 3);
  ASSERT_EQ(split.size(), 3u);
  for (std::size_t k = 0; k < 3; ++k) {
    ASSERT_EQ(split[k].size(), 6u) << k;
    EXPECT_EQ(split[k].front().action.microbatch, 2 * static_cast<int>(k));
    EXPECT_EQ(split[k].back().action.type, ActionType::STEP);  // the STEP stays with its mini-batch
  }
  EXPECT_TRUE(splitMinibatches({}, 2, 0, 0).empty());
  // From the second on: the first mini-batch's actions are left out.
  const auto tail = splitMinibatches(minibatches({0.1, 0.2, 0.3}), 2, 1, 3);
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[0].front().action.microbatch, 2);
  EXPECT_EQ(tail[1].size(), 6u);
  // Each action's mini-batch; a STEP before any micro-batch's action belongs to none.
  std::vector<TimedAction> actions = minibatches({0.1, 0.2});
  actions.insert(actions.begin(), {schedule::stepAction(0, 0), 0, 0});
  EXPECT_EQ(minibatchOfActions(actions, 2, 2), (std::vector<int>{-1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}));
}

TEST(Timeline, TheTypicalMinibatchIsTheMedianByItsSpanOverAllRanks) {
  // Rank 0 kept one mini-batch fewer than rank 1: only the last three of each count. Their
  // spans over both ranks: 0.2, 0.9 (rank 1 stalled), 0.4; the median is the last one.
  auto rank0 = splitMinibatches(minibatches({9, 0.2, 0.1, 0.4}), 2, 0, 4);
  rank0.erase(rank0.begin());
  const auto chosen = typicalMinibatch({rank0, splitMinibatches(minibatches({5, 0.2, 0.9, 0.3}), 2, 0, 4)});
  ASSERT_EQ(chosen.size(), 2u);
  EXPECT_EQ(chosen[0].front().action.microbatch, 6);
  EXPECT_EQ(chosen[1].front().action.microbatch, 6);
  EXPECT_DOUBLE_EQ(chosen[0].front().start, 0);  // on an axis that starts at 0
  EXPECT_NEAR(chosen[0].back().end, 0.4, 1e-12);
  EXPECT_NEAR(chosen[1].back().end, 0.3, 1e-12);
  const auto none = typicalMinibatch({{}, {}});  // none kept: empty ranks, no crash
  ASSERT_EQ(none.size(), 2u);
  EXPECT_TRUE(none[0].empty());
}

// ---- Chrome trace ------------------------------------------------------------------

TEST(ChromeTrace, HasOneCompleteEventPerActionAndTransfer) {
  const Timeline t = twoStages();
  const json_io::Json j = toChromeTrace(t);
  ASSERT_TRUE(j.at("traceEvents").is_array());
  EXPECT_EQ(j.at("displayTimeUnit"), "ms");
  EXPECT_EQ(j.at("otherData").at("title"), "tiny, 2 stages");
  EXPECT_EQ(j.at("otherData").at("source"), "simulated");

  int complete = 0, flows = 0;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") == "X") ++complete;
    if (e.at("ph") == "s" || e.at("ph") == "f") ++flows;
  }
  EXPECT_EQ(complete, 6 + 2);
  EXPECT_EQ(flows, 2 * 2);
}

TEST(ChromeTrace, TimesAreMicrosecondsAndNamesAreTheTextForm) {
  const json_io::Json j = toChromeTrace(twoStages());
  bool saw_b = false, saw_send = false;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    if (e.at("name") == "0B0v0") {
      saw_b = true;
      EXPECT_EQ(e.at("cat"), "B");
      EXPECT_DOUBLE_EQ(e.at("ts").get<double>(), 4500);
      EXPECT_DOUBLE_EQ(e.at("dur").get<double>(), 2000);
      EXPECT_EQ(e.at("pid"), 0);
      EXPECT_EQ(e.at("tid"), 0);
      EXPECT_EQ(e.at("args").at("stage"), 0);
      EXPECT_EQ(e.at("args").at("microbatch"), 0);
      EXPECT_EQ(e.at("args").at("version"), 0);
    }
    if (e.at("name") == "SEND_F 0>1 mb0") {
      saw_send = true;
      EXPECT_EQ(e.at("pid"), 0);
      EXPECT_EQ(e.at("tid"), 1);  // the sender's comm track
      EXPECT_DOUBLE_EQ(e.at("ts").get<double>(), 1000);
      EXPECT_DOUBLE_EQ(e.at("dur").get<double>(), 500);
      EXPECT_EQ(e.at("args").at("to_rank"), 1);
      EXPECT_EQ(e.at("args").at("bytes"), 4096);
    }
  }
  EXPECT_TRUE(saw_b);
  EXPECT_TRUE(saw_send);
}

TEST(ChromeTrace, NamesEveryRankAndItsTwoTracks) {
  const json_io::Json j = toChromeTrace(twoStages());
  int processes = 0, compute = 0, comm = 0;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") != "M") continue;
    if (e.at("name") == "process_name") {
      EXPECT_EQ(e.at("args").at("name"), "rank " + std::to_string(e.at("pid").get<int>()));
      ++processes;
    }
    if (e.at("name") == "thread_name") {
      const std::string n = e.at("args").at("name");
      if (n == "compute") {
        EXPECT_EQ(e.at("tid"), 0);
        ++compute;
      }
      if (n == "comm") {
        EXPECT_EQ(e.at("tid"), 1);
        ++comm;
      }
    }
  }
  EXPECT_EQ(processes, 2);
  EXPECT_EQ(compute, 2);
  EXPECT_EQ(comm, 2);
}

TEST(ChromeTrace, WrittenFileParsesBack) {
  const std::string path = ::testing::TempDir() + "pipetrain_trace_test.json";
  writeChromeTrace(twoStages(), path);
  const json_io::Json j = json_io::readFile(path);  // throws if not valid JSON
  EXPECT_EQ(j, toChromeTrace(twoStages()));
  std::remove(path.c_str());
}

// ---- SVG Gantt ---------------------------------------------------------------------

TEST(SvgGantt, HasARowPerRankAndABoxPerAction) {
  const std::string svg = toSvgGantt(twoStages());
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_EQ(count(svg, "<svg"), 1u);
  EXPECT_EQ(count(svg, "</svg>"), 1u);
  EXPECT_EQ(count(svg, "class=\"row\""), 2u);
  EXPECT_NE(svg.find(">rank 0<"), std::string::npos);
  EXPECT_NE(svg.find(">rank 1<"), std::string::npos);
  EXPECT_EQ(count(svg, "class=\"box "), 6u);
  EXPECT_EQ(count(svg, "class=\"transfer\""), 2u);
  EXPECT_EQ(count(svg, "<g"), count(svg, "</g>"));
  EXPECT_NE(svg.find("<title>rank 0: 0B0 v0, 4.5\xE2\x80\x93"
                     "6.5 ms</title>"),
            std::string::npos)
      << svg;
  EXPECT_NE(svg.find("makespan 7.20 ms"), std::string::npos);
}

TEST(SvgGantt, AxisPicksAUnitAndRoundTicks) {
  // 7.2 ms over 1200 px: ticks every whole millisecond, 0 to 7.
  const std::string ms = toSvgGantt(twoStages());
  EXPECT_NE(ms.find("time (ms)"), std::string::npos);
  for (int tick = 0; tick <= 7; ++tick)
    EXPECT_NE(ms.find(">" + std::to_string(tick) + "</text>"), std::string::npos) << tick;
  EXPECT_EQ(ms.find(">8</text>"), std::string::npos);

  Timeline fast;
  fast.ranks = {{{act(ActionType::F, 0, 0), 0, 25e-6}}};
  const std::string us = toSvgGantt(fast);
  EXPECT_NE(us.find("time (\xC2\xB5s)"), std::string::npos);
  EXPECT_NE(us.find(">24</text>"), std::string::npos);  // every 2 µs
  EXPECT_NE(us.find("makespan 25.0 \xC2\xB5s"), std::string::npos);
}

TEST(SvgGantt, ChartsSideBySideShareATimeAxis) {
  // Drawn on a span twice its makespan, the run covers half the axis: ticks to 14 ms.
  GanttOptions options;
  options.span_seconds = 0.0144;
  const std::string svg = toSvgGantt(twoStages(), options);
  EXPECT_NE(svg.find(">14</text>"), std::string::npos);
  EXPECT_NE(svg.find("makespan 7.20 ms"), std::string::npos);
  EXPECT_EQ(toSvgGantt(twoStages(), GanttOptions{}), toSvgGantt(twoStages()));
}

TEST(SvgGantt, AMeasuredTimelineSaysItsMessagesAreNotTraced) {
  Timeline t = twoStages();
  t.transfers.clear();
  EXPECT_NE(toSvgGantt(t).find("0 transfers"), std::string::npos);
  t.source = "measured";
  const std::string svg = toSvgGantt(t);
  EXPECT_EQ(svg.find("0 transfers"), std::string::npos);
  EXPECT_NE(svg.find("messages not traced"), std::string::npos);
}

TEST(TimelineJson, TransfersTravelWithTheTimeline) {
  const Timeline t = twoStages();
  const Timeline back = timelineFromJson(timelineToJson(t), "test");
  ASSERT_EQ(back.transfers.size(), t.transfers.size());
  for (std::size_t i = 0; i < t.transfers.size(); ++i) {
    EXPECT_EQ(back.transfers[i].send, t.transfers[i].send);
    EXPECT_EQ(back.transfers[i].from_rank, t.transfers[i].from_rank);
    EXPECT_EQ(back.transfers[i].to_rank, t.transfers[i].to_rank);
    EXPECT_EQ(back.transfers[i].end, t.transfers[i].end);
    EXPECT_EQ(back.transfers[i].bytes, t.transfers[i].bytes);
  }
  json_io::Json json = timelineToJson(t);
  json["transfers"][0][2] = 7;  // a rank the timeline does not have
  try {
    timelineFromJson(json, "summary.json: measured_timeline");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("summary.json: measured_timeline: expected a transfer"), std::string::npos)
        << e.what();
  }
}

TEST(SvgGantt, TransfersCanBeLeftOut) {
  GanttOptions options;
  options.show_transfers = false;
  const std::string svg = toSvgGantt(twoStages(), options);
  EXPECT_EQ(count(svg, "class=\"transfer\""), 0u);
  EXPECT_EQ(count(svg, "data-type=\"wire-"), 0u);
}

TEST(SvgGantt, LegendListsOnlyTheTypesThatOccur) {
  const std::string svg = toSvgGantt(twoStages());
  for (const char* present : {"F", "B", "STEP", "ALLREDUCE"})
    EXPECT_EQ(count(svg, std::string("data-type=\"") + present + "\""), 1u) << present;
  for (const char* absent : {"I", "W", "SEND_F", "RECV_B"})
    EXPECT_EQ(count(svg, std::string("data-type=\"") + absent + "\""), 0u) << absent;
}

TEST(SvgGantt, EscapesTextForXml) {
  Timeline t = twoStages();
  t.title = "a<b & \"c\"";
  t.source = "it's";
  const std::string svg = toSvgGantt(t);
  EXPECT_NE(svg.find("a&lt;b &amp; &quot;c&quot;"), std::string::npos);
  EXPECT_NE(svg.find("it&apos;s"), std::string::npos);
  EXPECT_EQ(svg.find("a<b"), std::string::npos);
}

TEST(SvgGantt, LabelsOnlyBoxesWideEnoughForThem) {
  Timeline t = twoStages();
  GanttOptions narrow;
  narrow.width = 100;  // 7.2 ms over 100 px: a 1 ms box is ~14 px, room for "0" only
  const std::string svg = toSvgGantt(t, narrow);
  EXPECT_EQ(count(svg, ">step<"), 0u);
  EXPECT_GT(count(svg, "class=\"mb\""), 0u);
}

TEST(SvgGantt, InterleavedRanksShowTheStage) {
  Timeline t;
  t.ranks = {{{act(ActionType::F, 0, 3), 0, 0.01}, {act(ActionType::F, 2, 3), 0.01, 0.02}}};
  const std::string svg = toSvgGantt(t);
  EXPECT_NE(svg.find(">0:3<"), std::string::npos);
  EXPECT_NE(svg.find(">2:3<"), std::string::npos);
  EXPECT_NE(svg.find("stages 0,2"), std::string::npos);
}

TEST(SvgGantt, OverlappedPairsAreOutlinedOnce) {
  Timeline t;
  Action f = act(ActionType::F, 0, 3);
  f.overlap_next = true;
  t.ranks = {{{f, 0, 0.01}, {act(ActionType::B, 1, 2), 0.01, 0.03}, {act(ActionType::F, 0, 4), 0.03, 0.04}}};
  const std::string svg = toSvgGantt(t);
  EXPECT_EQ(count(svg, "class=\"pair\""), 1u);
  EXPECT_NE(svg.find("forward and backward overlapped"), std::string::npos);
  EXPECT_EQ(toSvgGantt(twoStages()).find("overlapped"), std::string::npos);
}

TEST(SvgGantt, EmptyAndZeroLengthTimelinesStillDraw) {
  const std::string empty = toSvgGantt(Timeline{});
  EXPECT_NE(empty.find("</svg>"), std::string::npos);
  EXPECT_NE(empty.find("makespan 0 s"), std::string::npos);

  Timeline zero;
  zero.ranks = {{{act(ActionType::F, 0, 0), 0, 0}}, {}};
  const std::string svg = toSvgGantt(zero);
  EXPECT_EQ(count(svg, "class=\"box "), 1u);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

TEST(SvgGantt, OutputIsDeterministic) { EXPECT_EQ(toSvgGantt(twoStages()), toSvgGantt(twoStages())); }

TEST(SvgGantt, WritesTheFile) {
  const std::string path = ::testing::TempDir() + "pipetrain_gantt_test.svg";
  writeSvgGantt(twoStages(), path);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), toSvgGantt(twoStages()));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace pipetrain::trace
