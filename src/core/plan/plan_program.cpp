#include "pipetrain/plan/plan_program.h"

#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <tuple>

#include "pipetrain/schedule/program_check.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/util/error.h"

namespace pipetrain::plan {
namespace {

int stagesPerRank(const Plan& plan) {
  return schedule::stagesPerRank(schedule::traits(plan.schedule.name), plan.schedule.chunks);
}

// NOTE(program cache): the planner simulates many plans that differ only in their layers
// and devices (a walk moves one boundary at a time, copies repeat a pipeline), and the
// same schedule, stage graph and replica counts mean the same Program. Generating,
// lowering and checking it took about a quarter of planning GNMT under pipedream on 32
// GPUs (perf; docs/planner.md). The few Programs used last are kept, whole, by what
// makes them; the simulations of the planner's batch run on several threads.
class ProgramCache {
 public:
  using Key = std::tuple<std::string, int, int, int, bool, std::vector<std::vector<int>>, std::vector<int>>;

  schedule::Program get(const Key& key, Check check, const std::function<schedule::Program()>& build) {
    std::shared_ptr<Entry> entry;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = used_.begin(); it != used_.end(); ++it)
        if ((*it)->key == key) {
          entry = *it;
          used_.splice(used_.begin(), used_, it);  // the most recent first
          break;
        }
    }
    if (!entry) {
      entry = std::make_shared<Entry>();
      entry->key = key;
      entry->program = build();
      std::lock_guard<std::mutex> lock(mutex_);
      used_.push_front(entry);
      if (used_.size() > kKept) used_.pop_back();
    }
    if (check == Check::kValidate) {
      std::call_once(entry->validated, [&] { schedule::validate(entry->program); });
    }
    return entry->program;
  }

 private:
  // A walk's neighbours share their Program; so do a search's few depths at once.
  static constexpr std::size_t kKept = 8;
  struct Entry {
    Key key;
    schedule::Program program;
    std::once_flag validated;
  };
  std::mutex mutex_;
  std::list<std::shared_ptr<Entry>> used_;
};

}  // namespace

std::vector<std::vector<int>> stageRanks(const Plan& plan) {
  std::vector<std::vector<int>> ranks(plan.numStages());
  if (stagesPerRank(plan) > 1) {
    const schedule::ScheduleTraits& t = schedule::traits(plan.schedule.name);
    const int p = plan.numStages() / stagesPerRank(plan);
    for (int s = 0; s < plan.numStages(); ++s) ranks[s] = {schedule::placedRank(t.placement, s, p)};
    return ranks;
  }
  int next = 0;
  for (int s = 0; s < plan.numStages(); ++s)
    for (std::size_t k = 0; k < plan.stages[s].devices.size(); ++k) ranks[s].push_back(next++);
  return ranks;
}

std::vector<std::string> rankDeviceNames(const Plan& plan) {
  std::vector<std::string> devices;
  const auto ranks = stageRanks(plan);
  for (int s = 0; s < plan.numStages(); ++s)
    for (std::size_t k = 0; k < ranks[s].size(); ++k) {
      const int r = ranks[s][k];
      if (r >= static_cast<int>(devices.size())) devices.resize(r + 1);
      devices[r] = plan.stages[s].devices.at(k);
    }
  return devices;
}

std::vector<int> stageReplicas(const Plan& plan) {
  std::vector<int> replicas;
  for (const auto& ranks : stageRanks(plan)) replicas.push_back(static_cast<int>(ranks.size()));
  return replicas;
}

schedule::StageDag stageDag(const Plan& plan, const graph::LayerGraph& graph) {
  const StageGraph sg = stageGraph(plan, graph);
  return schedule::StageDag{sg.preds, sg.succs};
}

schedule::Program programForPlan(const Plan& plan, const schedule::StageDag& dag, int minibatches, Check check) {
  schedule::ScheduleSpec spec;
  spec.name = plan.schedule.name;
  spec.microbatches = plan.microbatches;
  spec.minibatches = minibatches;
  spec.chunks = plan.schedule.chunks;
  spec.vertical_sync = plan.schedule.vertical_sync;
  const std::vector<int> replicas = stageReplicas(plan);
  static ProgramCache cache;
  return cache.get({spec.name, spec.microbatches, spec.minibatches, spec.chunks, spec.vertical_sync, dag.preds, replicas},
                   check, [&] { return schedule::buildProgram(spec, dag, replicas); });
}

schedule::StageVersionCosts stageVersionCosts(const Stage& stage, const graph::LayerGraph& graph) {
  schedule::StageVersionCosts c;
  for (const std::string& name : stage.layers) {
    const graph::WeightVersionSeconds& v = graph.layer(graph.indexOf(name)).weight_versions;
    c.swap += v.swap;
    c.stash += v.stash;
    c.correction += v.correction;
  }
  // The runtime's executor: a stage recomputing part of its layers runs a backward pass
  // in two calls on the action's version (backwardInTwo), and the forward pass run again
  // reads its F's version (forwardAgain), which T2 does not correct.
  const int recomputed = stage.recomputedLayers();
  const bool partly = recomputed > 0 && recomputed < static_cast<int>(stage.layers.size());
  c.t2_runs = partly ? 2 : 1;
  c.backward_runs = c.t2_runs + (recomputed > 0 ? 1 : 0);
  return c;
}

int extraWeightBuffers(const ScheduleOptions& options) {
  const bool latest = schedule::traits(options.name).backward_weights == schedule::BackwardWeights::kLatest;
  return latest && options.pipemare_correction ? 2 : 0;
}

Plan chainPlan(const std::vector<std::string>& layers, const std::vector<int>& bounds,
               const std::vector<int>& replicas, const ScheduleOptions& schedule, int64_t microbatch_size,
               int microbatches) {
  const int stages = static_cast<int>(bounds.size()) - 1;
  if (stages < 1 || bounds.front() != 0 || bounds.back() != static_cast<int>(layers.size()))
    throw Error("stage bounds must run from 0 to the model's " + std::to_string(layers.size()) + " layers");
  if (!replicas.empty() && static_cast<int>(replicas.size()) != stages)
    throw Error(std::to_string(replicas.size()) + " replica counts for " + std::to_string(stages) + " stages");
  const schedule::ScheduleTraits& t = schedule::traits(schedule.name);
  const int per_rank = schedule::stagesPerRank(t, schedule.chunks);
  if (stages % per_rank != 0)
    throw Error(std::to_string(stages) + " stages cannot be split into " + std::to_string(per_rank) +
                " stages per rank under " + schedule.name);
  Plan plan;
  plan.microbatch_size = microbatch_size;
  plan.microbatches = microbatches;
  plan.schedule = schedule;
  int next_device = 0;
  for (int s = 0; s < stages; ++s) {
    if (bounds[s + 1] <= bounds[s])
      throw Error("stage bounds must increase: stage " + std::to_string(s) + " would have no layers");
    Stage st;
    st.layers.assign(layers.begin() + bounds[s], layers.begin() + bounds[s + 1]);
    if (per_rank > 1) {
      st.devices.push_back("dev" + std::to_string(schedule::placedRank(t.placement, s, stages / per_rank)));
    } else {
      for (int k = 0; k < (replicas.empty() ? 1 : replicas[s]); ++k)
        st.devices.push_back("dev" + std::to_string(next_device++));
    }
    plan.stages.push_back(std::move(st));
  }
  return plan;
}

}  // namespace pipetrain::plan
