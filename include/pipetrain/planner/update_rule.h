// The update rule a plan trains with: what its optimizer steps do to the model, apart
// from how fast they run. Synchronous schedules all train the same mini-batch SGD (they
// differ in speed alone, the exactness tests show), so plans with one global batch share
// a rule; an asynchronous one's rule is its own: how often each stage steps and how
// stale the weights its passes read (schedule/staleness.h). Plans with equal keys make
// the same progress per sample, which is what calibration measures once per rule
// (calibration.h) and the time-to-accuracy objective divides by (time_to_target.h).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "pipetrain/graph/layer_graph.h"
#include "pipetrain/plan/plan.h"

namespace pipetrain::planner {

struct UpdateRule {
  std::string key;          // equal for plans that train alike
  std::string description;  // for people: "pipedream: steps on 1 micro-batch(es) of 32, gradients 1,0 step(s) stale by stage"
  bool synchronous = true;
  int64_t samples_per_step = 0;  // the fewest samples a stage's step combines
  // Per stage, the most steps between the weights a micro-batch's forward pass read and
  // the step that applies its gradient (0: fresh, as in synchronous SGD).
  std::vector<int> stage_delays;
};

// Throws Error when the plan's schedule cannot use its numbers (plan::programForPlan).
UpdateRule updateRuleOf(const plan::Plan& plan, const graph::LayerGraph& graph);

// updateRuleOf over many plans of one graph, each rule found once per shape of plan that
// decides it (schedule and options, micro-batching, replicas per stage, stage DAG):
// plans that differ only in which layers or devices their stages hold train alike, and
// an asynchronous plan's rule takes building its Program (milliseconds on 1024 devices).
class UpdateRules {
 public:
  explicit UpdateRules(const graph::LayerGraph& graph) : graph_(graph) {}
  const UpdateRule& of(const plan::Plan& plan);
  const graph::LayerGraph& graph() const { return graph_; }

 private:
  const graph::LayerGraph& graph_;
  std::map<std::string, UpdateRule> by_shape_;
};

}  // namespace pipetrain::planner
