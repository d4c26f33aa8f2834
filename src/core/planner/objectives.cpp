// The table of planner objectives (objective.h): a new objective is a file of its own
// and a row here.
#include "pipetrain/planner/objective.h"
#include "pipetrain/util/error.h"

namespace pipetrain::planner {

const PlanObjective& timeToAccuracyObjective();  // time_to_accuracy_objective.cpp

const std::vector<const PlanObjective*>& objectives() {
  static const std::vector<const PlanObjective*> table{
      &throughputObjective(),
      &timeToAccuracyObjective(),
  };
  return table;
}

std::vector<std::string> objectiveNames() {
  std::vector<std::string> names;
  for (const PlanObjective* o : objectives()) names.push_back(o->name());
  return names;
}

const PlanObjective& objectiveNamed(const std::string& name) {
  for (const PlanObjective* o : objectives())
    if (name == o->name()) return *o;
  std::string known;
  for (const std::string& n : objectiveNames()) known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown objective '" + name + "' (known: " + known + ")");
}

std::string PlanObjective::family(const std::string&, bool, int64_t) const { return ""; }

double PlanObjective::toBeat(const std::function<double(const std::string&)>& best_of, const std::string& schedule,
                             bool single_stage, int64_t microbatch_size, int64_t) const {
  return best_of(family(schedule, single_stage, microbatch_size));
}

}  // namespace pipetrain::planner
