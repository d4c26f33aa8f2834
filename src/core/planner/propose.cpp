// Proposing (explorer.h): every plan the exploration considers for one schedule,
// micro-batch size and width, from the chain DP, the graph partitioner, data
// parallelism, copies of a pipeline and the multi-stage schedules' balanced splits;
// explorer.cpp simulates them best first.
#include <algorithm>
#include <map>
#include <vector>

#include "explorer.h"
#include "pipetrain/graph/series_parallel.h"
#include "pipetrain/plan/plan_program.h"
#include "pipetrain/planner/replicated_pipeline.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/util/error.h"

namespace pipetrain::planner::detail {
namespace {

// The widest plan the graph partitioner is asked for: its search grows with the cube of
// the devices (measured: docs/planner.md, "The graph partitioner: GraphPipe's search").
constexpr int kMaxGraphDevices = 64;
// The graph partitioner's budget of DP steps for a whole exploration beside the chain DP,
// and alone (--partitioner graph); their time is in docs/planner.md, "The graph
// partitioner: GraphPipe's search". Small models never reach it; PipeDream's ResNet-50
// and Inception-v3 reach it at their first search on 16 or more devices, whose plans then
// come from the chain DP.
constexpr int64_t kGraphStepsBesideChain = 4'000'000;
constexpr int64_t kGraphStepsAlone = 30'000'000;

}  // namespace

// partitionChain, through the optimum without memory limits that the schedules with
// the same stage times share (PartitionOptions::check_memory): where it fits this
// schedule's memory, no partition can do better, and the schedule's own DPs are not
// run. Results are the same; on clusters where memory does not bind, one DP serves
// gpipe, 1f1b, zb-h1 and zb-h2 (and 2bw, pipemare).
ChainPlan Explorer::partitionShared(PartitionOptions po, const plan::ScheduleOptions& schedule) {
  // The exhaustive search (prune off) takes no shortcut: it is the reference.
  if (!o_.prune) return partitionChain(graph_, cluster_, po, schedule);
  const std::string key = sharedKey(po);
  auto it = relaxed_.find(key);
  if (it == relaxed_.end()) {
    PartitionOptions free = po;
    free.check_memory = false;
    free.assumed_depth = 1;
    std::optional<Partition> optimum;
    try {
      optimum = solveChain(ChainProblem(graph_, cluster_, free));
    } catch (const Error&) {
      // no tiling at all (divisibility): the schedule's own DP says why
    }
    it = relaxed_.emplace(key, std::move(optimum)).first;
  }
  if (it->second) {
    po.extra_weight_buffers = plan::extraWeightBuffers(schedule);
    po.assumed_depth = static_cast<int>(it->second->stages.size());
    const ChainProblem problem(graph_, cluster_, po);
    if (fitsMemory(*it->second, problem)) {
      Partition p = *it->second;
      p.objective = problem.objective(p.stages);
      p.assumed_depth = po.assumed_depth;
      return {toPlan(p, problem, schedule), p};
    }
  }
  return partitionChain(graph_, cluster_, po, schedule);
}

void Explorer::addGraphNote(const std::string& note) {
  auto& notes = result_.graph_notes;
  if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(note);
}

// What decides a stage's time (not its memory): schedules that agree on it share the
// partitioners' optima without memory checks.
std::string Explorer::sharedKey(const PartitionOptions& po) {
  const schedule::ScheduleTraits& t = schedule::traits(po.schedule);
  return std::to_string(po.microbatch_size) + "/" + std::to_string(po.microbatches) + "/" +
         std::to_string(po.copies) + "/" + std::to_string(po.max_devices) + "/" +
         std::to_string(po.use_all_devices) + "/" + std::to_string(po.max_replicas) + "/" +
         std::to_string(t.replicable) + "/" + std::to_string(static_cast<int>(t.step_rule));
}

// partitionShared's counterpart for the graph partitioner, whose search costs far more.
GraphPlan Explorer::graphShared(PartitionOptions po, const plan::ScheduleOptions& schedule, GraphSearch search) {
  const std::string key = sharedKey(po) + "/" + std::to_string(static_cast<int>(search));
  auto it = graph_relaxed_.find(key);
  if (it == graph_relaxed_.end()) {
    PartitionOptions free = po;
    free.check_memory = false;
    std::optional<GraphPartition> optimum;
    try {
      free.max_graph_steps = graphStepsLeft();
      optimum = solveGraph(graph_, cluster_, free, search);
    } catch (const GraphSearchGaveUp&) {
      throw;
    } catch (const Error&) {
      // no tiling at all (divisibility): the schedule's own search says why
    }
    if (optimum) result_.graph_search_steps += optimum->search_steps;
    it = graph_relaxed_.emplace(key, std::move(optimum)).first;
  }
  po.extra_weight_buffers = plan::extraWeightBuffers(schedule);
  if (it->second && fitsMemory(*it->second, graph_, cluster_, po))
    return {toPlan(*it->second, graph_, cluster_, po, schedule), *it->second};
  po.max_graph_steps = graphStepsLeft();
  GraphPlan g = partitionGraph(graph_, cluster_, po, schedule, search);
  result_.graph_search_steps += g.partition.search_steps;
  return g;
}

// The graph partitioner's budget of DP steps for the whole exploration, less what its
// searches took so far.
int64_t Explorer::graphStepsBudget() const { return chain_partitioner_ ? kGraphStepsBesideChain : kGraphStepsAlone; }

int64_t Explorer::graphStepsLeft() const { return graphStepsBudget() - result_.graph_search_steps; }

// Every proposal for one schedule, micro-batch size and width: the partitioners' or a
// multi-stage schedule's balanced split.
void Explorer::explore(const std::string& name, int64_t b, int width) {
  const int m = static_cast<int>(o_.global_batch / b);
  const schedule::ScheduleTraits& t = schedule::traits(name);
  if (schedule::multiStage(t)) {
    const int per_rank = schedule::stagesPerRank(t, kInterleavedChunks);
    if (width < 2 || graph_.size() < width * per_rank || m % width != 0 || m < t.min_microbatches_per_rank * width)
      return;
    consider(name, b, width, [&]() -> std::optional<Candidate> {
      return Candidate{multiStagePlan(name, graph_, cluster_, width, b, m), {}, 0, 0, "balanced"};
    });
    return;
  }
  if (graph_partitioner_) exploreGraph(name, b, width);
  if (chain_partitioner_) {
    exploreChain(name, b, width, "chain");
    proposeDataParallel(name, b, width, "chain");
    proposeCopiedPipelines(name, b, width);
    proposeShapedPipelines(name, b, width);
  } else {
    // Beside its stage graphs, the graph partitioner proposes the sequential one: the
    // chain DP's cut of the layers in topological order. A chain of stages is a stage
    // graph too, but the tree's stages cannot hold one branch's tail with the next
    // one's head, and the bottleneck both searches minimise does not say which plan
    // simulates faster (candle-uno on fpga-ring: at micro-batch 16 the down-set search's
    // pipeline simulates at less than half this cut's speed). Under auto the chain
    // partitioner proposes it already.
    exploreChain(name, b, width, "sequential");
    proposeDataParallel(name, b, width, "graph");
  }
}

PartitionOptions Explorer::partitionOptions(const std::string& name, int64_t b, int width) const {
  PartitionOptions po;
  po.schedule = name;
  po.microbatch_size = b;
  po.microbatches = static_cast<int>(o_.global_batch / b);
  po.max_devices = width;
  po.use_all_devices = o_.use_all_devices;
  po.max_blocks = o_.max_blocks;
  po.recompute = o_.recompute;
  return po;
}

std::vector<Explorer::CopyBlock> Explorer::copyBlocks(const std::string& name, int64_t b, int width,
                                                      int fewest) const {
  const int m = static_cast<int>(o_.global_batch / b);
  std::vector<CopyBlock> out;
  for (int copies = fewest; 2 * copies <= width; ++copies) {
    if (width % copies != 0 || m % copies != 0) continue;
    const int per_copy = o_.max_replicas == 0 ? 0 : o_.max_replicas / copies;
    if (o_.max_replicas != 0 && per_copy < 1) break;
    CopyBlock c{copies, width / copies, partitionOptions(name, b, width / copies)};
    c.po.microbatches = m / copies;
    c.po.copies = copies;
    c.po.max_replicas = per_copy;
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<int> Explorer::replicaLimits() const {
  return o_.max_replicas == 1 ? std::vector<int>{1} : std::vector<int>{o_.max_replicas, 1};
}

// The graph partitioner's plans (GraphPipe's): within its budget of DP steps, on at
// most kMaxGraphDevices devices.
void Explorer::exploreGraph(const std::string& name, int64_t b, int width) {
  if (width > kMaxGraphDevices) {
    addGraphNote("plans on more than " + std::to_string(kMaxGraphDevices) +
                 " devices come from the chain DP only: the graph search grows with the cube of the devices");
    return;
  }
  PartitionOptions po = partitionOptions(name, b, width);
  plan::ScheduleOptions schedule;
  schedule.name = name;
  for (int max_replicas : replicaLimits()) {
    po.max_replicas = max_replicas;
    if (graphStepsLeft() <= 0) {
      addGraphNote("the graph partitioner's budget of " + std::to_string(graphStepsBudget()) + " DP steps ran out" +
                   (chain_partitioner_ ? ": the other combinations' plans come from the chain DP" : ""));
      return;
    }
    // Where the down-set search ran, the tree's plan too: they price transfers
    // differently (solveGraph), and the simulator decides.
    bool every_convex_partition = false;
    for (const GraphSearch search : {GraphSearch::kAuto, GraphSearch::kSeriesParallel}) {
      if (search == GraphSearch::kSeriesParallel && !every_convex_partition) break;  // kAuto ran the tree
      consider(name, b, width, [&]() -> std::optional<Candidate> {
        std::optional<GraphPlan> found;
        try {
          if (o_.prune) {
            found = graphShared(po, schedule, search);
          } else {
            po.max_graph_steps = graphStepsLeft();
            found = partitionGraph(graph_, cluster_, po, schedule, search);
            result_.graph_search_steps += found->partition.search_steps;
          }
        } catch (const GraphSearchGaveUp&) {
          result_.graph_search_steps = graphStepsBudget();  // a search gives up on what was left
          throw;
        }
        GraphPlan& g = *found;
        every_convex_partition = g.partition.every_convex_partition;
        for (const std::string& note : g.partition.notes) addGraphNote(note);
        return Candidate{std::move(g.plan), {}, g.partition.objective, 0, "graph"};
      });
    }
  }
}

// The chain DP's optimum and its best pure pipeline (with pure data parallelism beside
// them, explore()): the DP's bottleneck objective does not see the schedule's bubble, so
// the simulator decides. `by` names the proposer in the ranked table.
void Explorer::exploreChain(const std::string& name, int64_t b, int width, const std::string& by) {
  PartitionOptions po = partitionOptions(name, b, width);
  plan::ScheduleOptions schedule;
  schedule.name = name;
  const std::vector<int> replica_limits = replicaLimits();
  for (int max_replicas : replica_limits) {
    po.max_replicas = max_replicas;
    consider(name, b, width, [&]() -> std::optional<Candidate> {
      const ChainPlan chain = partitionShared(po, schedule);
      return Candidate{chain.plan, {}, chain.partition.objective, 0, by};
    });
  }
}

// Pure data parallelism on up to `width` devices (a chain of one stage, and a graph of
// one), proposed by each partitioner beside its optimum: its bottleneck objective prices
// the all-reduce but not a pipeline's bubble, so the simulator decides. On the fewest
// replicas whose busiest share of the m micro-batches is the width's, as the DP keeps
// (ChainProblem's replica starts): with m = 48 on 32 devices, 24 replicas running 2 each.
// (Requiring m % width == 0 left PipeDream's ResNet-50 on 32 GPUs at data parallelism on
// 16, predicted well below 24: docs/planner.md, "The exploration: BaPipe's joint choice".)
void Explorer::proposeDataParallel(const std::string& name, int64_t b, int width, const std::string& by) {
  const int m = static_cast<int>(o_.global_batch / b);
  const schedule::ScheduleTraits& traits = schedule::traits(name);
  if (o_.max_replicas == 1 || width < 2 || !traits.replicable) return;
  const int share = schedule::busiestReplicaShare(m, std::min(width, m));
  const int replicas = o_.use_all_devices ? width : (m + share - 1) / share;
  if (replicas < 2 || !schedule::replicasCanSplit(traits, m, replicas)) return;
  PartitionOptions po = partitionOptions(name, b, width);
  plan::ScheduleOptions schedule;
  schedule.name = name;
  po.max_replicas = o_.max_replicas;
  consider(name, b, width, [&]() -> std::optional<Candidate> {
    const ChainProblem problem(graph_, cluster_, po);
    if (!problem.allowedDevices(0, replicas)) return std::nullopt;
    const Partition all{{{0, problem.numBlocks(), 0, replicas}}, 0, 1};
    return Candidate{toPlan(all, problem, schedule), {}, problem.objective(all.stages), 0, by};
  });
}

// PipeDream's shape, which the chain DP's contiguous blocks cannot take: `width` devices
// as `copies` blocks, each running a copy of one pipeline on its share of the
// micro-batches (replicated_pipeline.h). The pipeline is the DP's optimum on the first
// block for that share, its all-reduce priced across the copies, and its best pure
// pipeline. Between blocks only the stages' all-reduce crosses, where a chain's stages
// on consecutive blocks send every micro-batch's activations (PipeDream's ResNet-50 on 4
// servers of 8 GPUs under 2bw, where a copy per server beats the chain's best:
// docs/planner.md, "The exploration: BaPipe's joint choice").
void Explorer::proposeCopiedPipelines(const std::string& name, int64_t b, int width) {
  const schedule::ScheduleTraits& traits = schedule::traits(name);
  if (o_.max_replicas == 1 || !traits.replicable || schedule::multiStage(traits)) return;
  plan::ScheduleOptions schedule;
  schedule.name = name;
  for (CopyBlock& c : copyBlocks(name, b, width, 2)) {
    const int per_copy = c.po.max_replicas;
    for (int max_replicas : per_copy == 1 ? std::vector<int>{1} : std::vector<int>{per_copy, 1}) {
      c.po.max_replicas = max_replicas;
      consider(name, b, width, [&]() -> std::optional<Candidate> {
        const ChainPlan chain = partitionShared(c.po, schedule);
        return Candidate{replicatePipeline(chain.plan, c.copies, c.block, cluster_), {}, chain.partition.objective,
                         0, "copies"};
      });
    }
  }
}

// Under a fixed schedule, pipelines of given shapes on the whole cluster, alone or
// copied (deviceShapes), their layers cut by the chain DP on those device blocks
// (solveChainOnDevices), once with the transfers hidden behind compute and once added to
// it. The DP's own optimum minimises the slowest stage, blind to the bubble, and picks
// one split of each block's devices: on PipeDream's ResNet-50 over 4 servers of 8 GPUs
// under 1f1b, 8 copies of a 2 + 2 device pipeline, where no walk from the best plans
// reached 3 + 1. Proposed as a shape, 3 + 1 walks to a faster plan (docs/planner.md,
// "Fixed schedules against an oracle"). The simulator ranks the shapes beside the DP's
// optimum, and the walks start from the best.
void Explorer::proposeShapedPipelines(const std::string& name, int64_t b, int width) {
  const schedule::ScheduleTraits& traits = schedule::traits(name);
  // Under auto the exploration solves every schedule and micro-batch size: there these
  // DPs (about 30 shapes per copy count) nearly doubled Inception-v3's search on 128 GPUs
  // (docs/planner.md, "Fixed schedules against an oracle").
  if (o_.schedule == "auto" || width != cluster_.size() || width < 2 || schedule::multiStage(traits)) return;
  const bool replicas = traits.replicable && o_.max_replicas != 1;
  plan::ScheduleOptions schedule;
  schedule.name = name;
  for (const CopyBlock& c : copyBlocks(name, b, width, 1)) {
    if (c.copies > 1 && !replicas) break;
    const int copies = c.copies, block = c.block;
    std::vector<int> part_sizes{1};
    if (replicas)
      for (int q = 2; 2 * q <= block; q *= 2) part_sizes.push_back(q);
    if (replicas && !cluster_.levels().empty()) {
      const int server = cluster_.levels().front().group_size;
      if (2 * server <= block && std::find(part_sizes.begin(), part_sizes.end(), server) == part_sizes.end())
        part_sizes.push_back(server);
    }
    std::map<int, ChainProblem> problems;  // by stage count: the depth memory is sized for
    for (const std::vector<int>& bounds : deviceShapes(block, part_sizes, o_.use_all_devices)) {
      const int stages = static_cast<int>(bounds.size()) - 1;
      for (const Transfers transfers : {Transfers::kOverlapped, Transfers::kSerialized}) {
        consider(name, b, width, [&]() -> std::optional<Candidate> {
          auto it = problems.find(stages);
          if (it == problems.end()) {
            PartitionOptions po = c.po;
            po.assumed_depth = stages;
            po.extra_weight_buffers = plan::extraWeightBuffers(schedule);
            it = problems.emplace(stages, ChainProblem(graph_, cluster_, po)).first;
          }
          const ChainProblem& problem = it->second;
          if (stages > problem.numBlocks()) return std::nullopt;
          // Replica counts that cannot split the micro-batches or pass max_replicas, the
          // problem prices as never fitting: the DP finds no cut.
          const std::optional<Partition> cut = solveChainOnDevices(problem, bounds, transfers);
          if (!cut) return std::nullopt;
          plan::Plan pipeline = toPlan(*cut, problem, schedule);
          return Candidate{copies == 1 ? std::move(pipeline) : replicatePipeline(pipeline, copies, block, cluster_), {},
                           problem.objective(cut->stages), 0, "shaped"};
        });
      }
    }
  }
}

// Checks a proposal once and queues it for search(), or records why not.
void Explorer::consider(const std::string& name, int64_t b, int width, const std::function<std::optional<Candidate>()>& propose) {
  Dropped drop{name, b, width, ""};
  try {
    std::optional<Candidate> proposed = propose();
    if (!proposed || !seen_.insert(planKey(proposed->plan)).second) return;
    Candidate& c = *proposed;
    recomputeAsAsked(c.plan);
    drop.devices = devicesUsed(c.plan);
    if (o_.use_all_devices && drop.devices < cluster_.size()) {
      drop.reason = "leaves " + std::to_string(cluster_.size() - drop.devices) + " devices idle";
      result_.dropped.push_back(std::move(drop));
      return;
    }
    // Memory is judged later, from the schedule's footprint rather than validate's estimate.
    plan::validate(c.plan, graph_, cluster_, "candidate", std::vector<int64_t>(c.plan.numStages(), 0));
    c.depth = schedule::pipelineDepth(plan::stageDag(c.plan, graph_));
    const double bound = resourceBound(c.plan);
    proposals_.push_back({std::move(c), drop, bound, proposed_++});
    std::push_heap(proposals_.begin(), proposals_.end(), ByBound{});
    return;
  } catch (const Error& e) {
    drop.reason = e.what();
  }
  result_.dropped.push_back(std::move(drop));
}

}  // namespace pipetrain::planner::detail
