// The pipeline shapes the generators share, and generate + lower.
#include "pipetrain/schedule/schedules.h"

#include "pipetrain/schedule/passes.h"

namespace pipetrain::schedule {

StageDag chainDag(int stages) {
  StageDag dag;
  dag.preds.assign(stages, {});
  dag.succs.assign(stages, {});
  for (int s = 0; s + 1 < stages; ++s) {
    dag.succs[s].push_back(s + 1);
    dag.preds[s + 1].push_back(s);
  }
  return dag;
}

Program buildProgram(const ScheduleSpec& spec, const StageDag& dag, const std::vector<int>& replicas) {
  return lower(generate(spec, dag, replicas));
}

}  // namespace pipetrain::schedule
