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
  Json ranks = Json::array();
  for (const auto& r : timeline.ranks) ranks.push_back(actionsToJson(r));
  return {{"title", timeline.title}, {"source", timeline.source}, {"ranks", ranks}};
}

Timeline timelineFromJson(const Json& json, const std::string& origin) {
  if (!json.is_object() || !json.contains("ranks") || !json["ranks"].is_array())
    throw Error(origin + ": a timeline needs \"ranks\", an array per rank");
  Timeline t;
  t.title = json.value("title", "");
  t.source = json.value("source", "");
  for (std::size_t r = 0; r < json["ranks"].size(); ++r)
    t.ranks.push_back(actionsFromJson(json["ranks"][r], origin + ": rank " + std::to_string(r)));
  return t;
}

}  // namespace pipetrain::trace
