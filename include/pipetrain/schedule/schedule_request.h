// What `pipetrain schedule` and the Python API's schedule() ask: a schedule's Program on
// a chain of stages, generated and checked.
#pragma once

#include <vector>

#include "pipetrain/schedule/schedules.h"
#include "pipetrain/util/option_table.h"

namespace pipetrain::schedule {

struct ScheduleRequest {
  ScheduleSpec spec;
  int stages = 0;  // pipeline ranks P (each runs one stage, or its chunks)
};

// The request's options, declared once (util/option_table.h).
std::vector<options::Option> scheduleOptions(ScheduleRequest& request);

// Throws Error where the schedule is unknown or the Program would be absurdly large.
Program generatedProgram(const ScheduleRequest& request);

}  // namespace pipetrain::schedule
