#include "pipetrain/planner/planner_options.h"

namespace pipetrain::planner {

using Setter = std::function<void(const std::string&)>;

options::Option partitionerOption(Partitioner& partitioner, const std::string& group) {
  return options::Option{"partitioner", group,
                         "chain (PipeDream's DP over the layers in order), graph (GraphPipe's: independent branches "
                         "become parallel stages) or auto (both on a multi-branch model; the simulator chooses) "
                         "[auto]",
                         Setter([&partitioner](const std::string& name) { partitioner = partitionerFromName(name); })}
      .among({"auto", "chain", "graph"});
}

options::Option recomputeOption(Recompute& recompute, const std::string& group) {
  return options::Option{"recompute", group,
                         "activation recomputation: auto (the planner makes the stages that would not fit their "
                         "memory recompute their forward pass before the backward pass, and prices it), none, or "
                         "full (every stage) [auto]",
                         Setter([&recompute](const std::string& name) { recompute = recomputeFromName(name); })}
      .among({"auto", "none", "full"});
}

options::Option objectiveOption(const PlanObjective*& objective, const std::string& group,
                                const std::string& context) {
  std::string help = context + "what the planner ranks by:";
  for (const PlanObjective* o : objectives())
    help += std::string(o == objectives().front() ? " " : "; ") + o->name() + " (" + o->help() + ")";
  return options::Option{"objective", group, help + " [" + objectives().front()->name() + "]",
                         Setter([&objective](const std::string& name) { objective = &objectiveNamed(name); })}
      .among(objectiveNames());
}

}  // namespace pipetrain::planner
