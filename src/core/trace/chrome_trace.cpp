#include "pipetrain/trace/chrome_trace.h"

#include <cmath>

namespace pipetrain::trace {
namespace {

using json_io::Json;
using schedule::Action;

constexpr int kComputeTid = 0;
constexpr int kCommTid = 1;

// Trace Event Format times are microseconds. Rounding to the nanosecond keeps the
// file free of binary noise such as 1000.0000000000001.
double micros(double seconds) { return std::round(seconds * 1e9) / 1e3; }

Json metadata(const char* what, int pid, int tid, Json args) {
  return Json{{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

void addRankMetadata(Json& events, int rank) {
  events.push_back(metadata("process_name", rank, 0, {{"name", "rank " + std::to_string(rank)}}));
  // Without sort indices viewers order processes by first appearance, not by rank.
  events.push_back(metadata("process_sort_index", rank, 0, {{"sort_index", rank}}));
  events.push_back(metadata("thread_name", rank, kComputeTid, {{"name", "compute"}}));
  events.push_back(metadata("thread_sort_index", rank, kComputeTid, {{"sort_index", kComputeTid}}));
  events.push_back(metadata("thread_name", rank, kCommTid, {{"name", "comm"}}));
  events.push_back(metadata("thread_sort_index", rank, kCommTid, {{"sort_index", kCommTid}}));
}

Json actionEvent(const TimedAction& a, int rank) {
  return Json{
      {"name", schedule::toString(a.action)},
      {"cat", schedule::name(a.action.type)},
      {"ph", "X"},
      {"ts", micros(a.start)},
      {"dur", micros(a.end - a.start)},
      {"pid", rank},
      {"tid", kComputeTid},
      {"args",
       {{"stage", a.action.stage}, {"microbatch", a.action.microbatch}, {"version", a.action.version}}}};
}

// "SEND_F 1>2 mb3": stage to stage, as in the action's text form, but spaced out so
// that the micro-batch stands out in a viewer's narrow slice.
std::string transferName(const Transfer& t) {
  const Action& s = t.send;
  return std::string(schedule::name(s.type)) + " " + std::to_string(s.stage) + ">" +
         std::to_string(s.peer_stage) + " mb" + std::to_string(s.microbatch);
}

}  // namespace

Json toChromeTrace(const Timeline& timeline) {
  Json events = Json::array();
  for (int r = 0; r < timeline.numRanks(); ++r) addRankMetadata(events, r);
  for (int r = 0; r < timeline.numRanks(); ++r)
    for (const TimedAction& a : timeline.ranks[static_cast<std::size_t>(r)])
      events.push_back(actionEvent(a, r));

  for (std::size_t i = 0; i < timeline.transfers.size(); ++i) {
    const Transfer& t = timeline.transfers[i];
    const std::string label = transferName(t);
    events.push_back(Json{{"name", label},
                          {"cat", "transfer"},
                          {"ph", "X"},
                          {"ts", micros(t.start)},
                          {"dur", micros(t.end - t.start)},
                          {"pid", t.from_rank},
                          {"tid", kCommTid},
                          {"args",
                           {{"bytes", t.bytes},
                            {"from_rank", t.from_rank},
                            {"to_rank", t.to_rank},
                            {"stage", t.send.stage},
                            {"microbatch", t.send.microbatch}}}});
    // A flow arrow from the message to the receiver's next compute slice after the
    // arrival: the start sits mid-message so it is surely inside the sender's slice,
    // and the end, without "bp":"e", binds to the next slice on the receiver's track.
    const Json id = static_cast<uint64_t>(i);
    events.push_back(Json{{"name", label},
                          {"cat", "flow"},
                          {"ph", "s"},
                          {"id", id},
                          {"ts", micros((t.start + t.end) / 2)},
                          {"pid", t.from_rank},
                          {"tid", kCommTid}});
    events.push_back(Json{{"name", label},
                          {"cat", "flow"},
                          {"ph", "f"},
                          {"id", id},
                          {"ts", micros(t.end)},
                          {"pid", t.to_rank},
                          {"tid", kComputeTid}});
  }

  return Json{{"traceEvents", std::move(events)},
              {"displayTimeUnit", "ms"},
              {"otherData", {{"title", timeline.title}, {"source", timeline.source}}}};
}

void writeChromeTrace(const Timeline& timeline, const std::string& path) {
  json_io::writeFile(path, toChromeTrace(timeline));
}

}  // namespace pipetrain::trace
