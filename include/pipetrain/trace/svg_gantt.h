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
  // Seconds the time axis spans (0: the timeline's own makespan). Charts drawn side by
  // side share one, so that a run twice as long is drawn twice as wide.
  double span_seconds = 0;
};

std::string toSvgGantt(const Timeline& timeline, const GanttOptions& options = {});
void writeSvgGantt(const Timeline& timeline, const std::string& path,
                   const GanttOptions& options = {});

}  // namespace pipetrain::trace
