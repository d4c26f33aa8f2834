// A Timeline as JSON, for files that carry one (a train summary, a rank's result):
//   {"title": ..., "source": ..., "ranks": [[[action text, start, end(, true)], ...], ...],
//    "transfers": [[send action text, from rank, to rank, start, end, bytes], ...]}
// where a trailing `true` marks the F of an overlapped pair (its text cannot say it), and
// "transfers" is left out where there are none (a measured timeline's messages are not
// traced).
#pragma once

#include <vector>

#include "pipetrain/trace/timeline.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::trace {

json_io::Json actionsToJson(const std::vector<TimedAction>& actions);
// Throws Error naming `origin` when an entry is malformed.
std::vector<TimedAction> actionsFromJson(const json_io::Json& json, const std::string& origin);

json_io::Json timelineToJson(const Timeline& timeline);
Timeline timelineFromJson(const json_io::Json& json, const std::string& origin);

}  // namespace pipetrain::trace
