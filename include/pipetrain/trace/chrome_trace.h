// Chrome trace ("Trace Event Format") export of a Timeline; opens in Perfetto and
// chrome://tracing. One process per rank, with a compute track and a comm track.
#pragma once

#include <string>

#include "pipetrain/trace/timeline.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::trace {

json_io::Json toChromeTrace(const Timeline& timeline);
void writeChromeTrace(const Timeline& timeline, const std::string& path);

}  // namespace pipetrain::trace
