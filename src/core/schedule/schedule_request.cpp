#include "pipetrain/schedule/schedule_request.h"

#include "pipetrain/schedule/program_check.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/limits.h"

namespace pipetrain::schedule {

std::vector<options::Option> scheduleOptions(ScheduleRequest& r) {
  using options::Option;
  const std::string group = "Options";
  return {
      Option{"schedule", group, scheduleNameList(), &r.spec.name}.shown(),
      Option{"stages", group, "pipeline ranks P (interleaved: each runs --chunks stages; zb-v, dualpipev: two)",
             &r.stages}
          .positive(),
      Option{"microbatches", group, "micro-batches per mini-batch M", &r.spec.microbatches}.positive().shown(),
      Option{"minibatches", group, "mini-batches to run", &r.spec.minibatches}.positive().shown(),
      Option{"chunks", group, "interleaved: stages per rank V", &r.spec.chunks}.positive().shown(),
      {"vertical-sync", group, "pipedream: every stage reads the input stage's version", &r.spec.vertical_sync},
  };
}

Program generatedProgram(const ScheduleRequest& r) {
  if (r.stages < 1) throw Error("--stages must be at least 1 (or give --csv FILE)");
  // In 64 bits: --stages 2147483647 times two stages per rank overflowed an int, and the
  // chain of that many stages ran out of memory before any check.
  const int64_t stages = int64_t{r.stages} * stagesPerRank(traits(r.spec.name), r.spec.chunks);
  limits::checkProgramSize(stages, r.spec.microbatches, r.spec.minibatches, "--stages");
  Program program = buildProgram(r.spec, chainDag(static_cast<int>(stages)));
  validate(program);
  return program;
}

}  // namespace pipetrain::schedule
