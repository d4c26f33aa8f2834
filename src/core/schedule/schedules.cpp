// Registry of schedule names and the pipeline shape helpers the generators share.
#include "pipetrain/schedule/schedules.h"

#include <algorithm>

#include "pipetrain/schedule/passes.h"
#include "pipetrain/util/error.h"

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

const std::vector<std::string>& scheduleNames() {
  static const std::vector<std::string> names = {"gpipe", "1f1b", "pipedream", "2bw",
                                                 "pipemare", "interleaved", "zb-h1"};
  return names;
}

bool isAsynchronous(const std::string& name) {
  return name == "pipedream" || name == "2bw" || name == "pipemare";
}

void checkScheduleName(const std::string& name) {
  const auto& names = scheduleNames();
  if (std::find(names.begin(), names.end(), name) != names.end()) return;
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  throw Error("unknown schedule \"" + name + "\" (known: " + list + ")");
}

Program buildProgram(const ScheduleSpec& spec, const StageDag& dag, const std::vector<int>& replicas) {
  Program program = generate(spec, dag);
  if (!replicas.empty()) {
    if (static_cast<int>(replicas.size()) != dag.size())
      throw Error("replica counts given for " + std::to_string(replicas.size()) + " stages, but the pipeline has " +
                  std::to_string(dag.size()));
    // replicate() works per rank; without interleaving rank r runs stage r.
    std::vector<int> copies(program.numRanks(), 1);
    for (int s = 0; s < dag.size(); ++s) copies[program.stage_ranks[s][0]] = replicas[s];
    program = replicate(program, copies);
  }
  return lower(program);
}

}  // namespace pipetrain::schedule
