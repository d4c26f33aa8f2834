// SVG Gantt chart of a Timeline: a row per rank, a colour per action type, the
// micro-batch number in each box, idle time (bubbles) left visible, and a legend.
#pragma once

#include <string>

#include "pipetrain/trace/timeline.h"

namespace pipetrain::trace {

struct GanttOptions {
  int width = 1200;        // pixels for the time axis
  int row_height = 28;
  bool show_transfers = true;  // thin bars under each rank for its outgoing messages
};

std::string toSvgGantt(const Timeline& timeline, const GanttOptions& options = {});
void writeSvgGantt(const Timeline& timeline, const std::string& path,
                   const GanttOptions& options = {});

}  // namespace pipetrain::trace
