// The throughput objective: the most samples per second, as explore() ranks them.
#include "pipetrain/planner/explore.h"
#include "pipetrain/planner/objective.h"

namespace pipetrain::planner {
namespace {

class Throughput : public PlanObjective {
 public:
  const char* name() const override { return "throughput"; }
  const char* help() const override { return "the most samples per second"; }
  void rank(Exploration& e, const graph::LayerGraph&, const ObjectiveInputs&) const override { e.objective = this; }
  // Why it ranked as it did: the profile's equals and what the runner-up lost by.
  void addNotes(const Exploration& e, std::vector<std::string>& notes) const override {
    if (const std::string note = e.noiseNote(); !note.empty()) notes.push_back(note);
    if (const std::string lost = e.runnerUpLost(); !lost.empty()) notes.push_back("runner-up lost: " + lost);
  }
};

}  // namespace

const PlanObjective& throughputObjective() {
  static const Throughput objective;
  return objective;
}

}  // namespace pipetrain::planner
