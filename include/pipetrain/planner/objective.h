// What the planner ranks by. Every objective searches the same plans (explore.h): each
// says which plans compete apart during the search and what throughput a plan must beat
// to matter there (the optimistic bound that prunes), reorders the ranked plans by its
// score once they are simulated, and says in the ranked table, its notes and the JSON
// what it scored. The objectives are the rows of objectives() (objectives.cpp), each
// in a file of its own: throughput_objective.cpp, time_to_accuracy_objective.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pipetrain/util/json_io.h"

namespace pipetrain::graph {
class LayerGraph;
}

namespace pipetrain::planner {

class Calibrator;
struct Candidate;
struct Exploration;

// The most update rules calibration trains for one ranking (time_to_target.h).
inline constexpr int kMaxCalibratedRules = 8;

// What an objective may need beyond the model, the cluster and the options.
struct ObjectiveInputs {
  // Where update rules' loss curves come from (time_to_target.h), made on first call:
  // making one costs (the model and held-out data are opened), and an objective calls it
  // only where its ranking needs curves.
  std::function<Calibrator&()> calibrator;
  int max_rules = kMaxCalibratedRules;  // the calibrator's limit on the rules it trains
};

class PlanObjective {
 public:
  virtual ~PlanObjective() = default;
  virtual const char* name() const = 0;  // as --objective takes it
  virtual const char* help() const = 0;  // what it ranks by, for --help
  // Whether rank() may need ObjectiveInputs::calibrator: explore() refuses to start without one.
  virtual bool needsCalibrator() const { return false; }

  // The search. Plans of different families compete apart: each family's best is kept
  // ("" for all: one family). `best_of` gives a family's best throughput so far (0 before
  // pruning starts); toBeat is the throughput a plan of that schedule, shape and
  // micro-batch must beat to matter: by default its own family's best.
  virtual std::string family(const std::string& schedule, bool single_stage, int64_t microbatch_size) const;
  virtual double toBeat(const std::function<double(const std::string&)>& best_of, const std::string& schedule,
                        bool single_stage, int64_t microbatch_size, int64_t global_batch) const;

  // The ranking: e.ranked arrives best throughput first (the profile's equals chosen by
  // shape); rank() reorders it by this objective and sets e.objective to what ranked it.
  virtual void rank(Exploration& e, const graph::LayerGraph& graph, const ObjectiveInputs& inputs) const = 0;

  // What it says (report/exploration_table.h, Exploration::toJson): the ranked table's
  // extra columns with their caption, each candidate's cells in them, the notes on the
  // ranking, a clause after "chosen: ...", and the fields it adds to the JSON.
  virtual std::vector<std::string> header() const { return {}; }
  virtual std::string caption() const { return ""; }
  virtual std::vector<std::string> cells(const Candidate& /*c*/) const { return {}; }
  virtual void addNotes(const Exploration& e, std::vector<std::string>& notes) const = 0;
  virtual std::string chosenClause(const Candidate& /*best*/) const { return ""; }
  virtual void addJson(const Exploration& /*e*/, json_io::Json& /*j*/) const {}
  virtual void addCandidateJson(const Candidate& /*c*/, json_io::Json& /*j*/) const {}
};

// The table of objectives, throughput first (the default).
const std::vector<const PlanObjective*>& objectives();
const PlanObjective& throughputObjective();
// The objective of that name; Error naming the known ones otherwise.
const PlanObjective& objectiveNamed(const std::string& name);
std::vector<std::string> objectiveNames();

}  // namespace pipetrain::planner
