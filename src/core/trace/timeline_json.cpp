#include "pipetrain/trace/timeline_json.h"

#include "pipetrain/util/error.h"

namespace pipetrain::trace {

using json_io::Json;

Json actionsToJson(const std::vector<TimedAction>& actions) {
  Json out = Json::array();
  for (const auto& a : actions) {
    Json entry = {schedule::toString(a.action), a.start, a.end};
    if (a.action.overlap_next) entry.push_back(true);
    out.push_back(std::move(entry));
  }
  return out;
}

std::vector<TimedAction> actionsFromJson(const Json& json, const std::string& origin) {
  if (!json.is_array()) throw Error(origin + ": expected an array of [action, start, end]");
  std::vector<TimedAction> out;
  for (const auto& entry : json) {
    if (!entry.is_array() || entry.size() < 3 || entry.size() > 4 || !entry[0].is_string() ||
        !entry[1].is_number() || !entry[2].is_number() || (entry.size() == 4 && !entry[3].is_boolean()))
      throw Error(origin + ": expected [action, start, end(, overlapped)], got " + entry.dump());
    TimedAction a{schedule::parseAction(entry[0].get<std::string>()), entry[1].get<double>(), entry[2].get<double>()};
    a.action.overlap_next = entry.size() == 4 && entry[3].get<bool>();
    out.push_back(a);
  }
  return out;
}

Json timelineToJson(const Timeline& timeline) {
  Json ranks = Json::array(), transfers = Json::array();
  for (const auto& r : timeline.ranks) ranks.push_back(actionsToJson(r));
  for (const Transfer& t : timeline.transfers)
    transfers.push_back({schedule::toString(t.send), t.from_rank, t.to_rank, t.start, t.end, t.bytes});
  Json out = {{"title", timeline.title}, {"source", timeline.source}, {"ranks", ranks}};
  if (!transfers.empty()) out["transfers"] = transfers;
  return out;
}

Timeline timelineFromJson(const Json& json, const std::string& origin) {
  if (!json.is_object() || !json.contains("ranks") || !json["ranks"].is_array())
    throw Error(origin + ": a timeline needs \"ranks\", an array per rank");
  Timeline t;
  t.title = json.value("title", "");
  t.source = json.value("source", "");
  for (std::size_t r = 0; r < json["ranks"].size(); ++r)
    t.ranks.push_back(actionsFromJson(json["ranks"][r], origin + ": rank " + std::to_string(r)));
  if (json.contains("transfers")) {
    if (!json["transfers"].is_array()) throw Error(origin + ": \"transfers\" must be an array");
    const int ranks = t.numRanks();
    for (const auto& e : json["transfers"]) {
      const bool ok = e.is_array() && e.size() == 6 && e[0].is_string() && e[1].is_number_integer() &&
                      e[2].is_number_integer() && e[3].is_number() && e[4].is_number() && e[5].is_number();
      if (!ok || e[1].get<int64_t>() < 0 || e[1].get<int64_t>() >= ranks || e[2].get<int64_t>() < 0 ||
          e[2].get<int64_t>() >= ranks)
        throw Error(origin + ": expected a transfer [send action, from rank, to rank, start, end, bytes] between its " +
                    std::to_string(ranks) + " ranks, got " + e.dump());
      t.transfers.push_back({schedule::parseAction(e[0].get<std::string>()), static_cast<int>(e[1].get<int64_t>()),
                             static_cast<int>(e[2].get<int64_t>()), e[3].get<double>(), e[4].get<double>(),
                             e[5].get<double>()});
    }
  }
  return t;
}

}  // namespace pipetrain::trace
