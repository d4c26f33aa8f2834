#include <algorithm>
#include <cmath>
#include <memory>

#include "explorer.h"
#include "pipetrain/plan/plan_program.h"
#include "pipetrain/planner/replicated_pipeline.h"
#include "pipetrain/schedule/schedules.h"
#include "pipetrain/sim/evaluate.h"
#include "pipetrain/util/error.h"

namespace pipetrain::planner::detail {
namespace {

// The refinement's simulations: at most this many, and at most this much work simulated
// in all (simulationWork): on PipeDream's published profiles, a plan of 3 stages on 32
// GPUs at 48 micro-batches gets 93 simulations, one on 128 GPUs at 192 micro-batches 23
// (under auto; a fixed schedule gets 4 times as many).
constexpr int kRefineSimulations = 128;
constexpr int64_t kRefineWork = 16384;
// How many times that a fixed schedule's refinement may simulate (refine()).
constexpr int64_t kFixedScheduleRefinement = 4;
// The last look's simulations per stage of the leading plan (refine()).
constexpr int kLastLookPerStage = 4;

// What simulating a plan costs, in the actions it simulates: each micro-batch's passes
// through each stage, and each rank's all-reduce and step. A stage's replicas share its
// micro-batches, so they add no passes; counted as ranks x micro-batches, the walks on
// 128 GPUs stopped on their budget (docs/planner.md, "Walks best first, on a budget
// counted in actions"). Micro-batches are those predictReport simulates (where the
// extrapolation holds; more where it simulates the mini-batch whole).
int64_t simulationWork(const plan::Plan& p) {
  const auto points = sim::extrapolationPoints(p);
  const int64_t microbatches = points ? points->first + points->second : p.microbatches;
  return p.numStages() * microbatches + devicesUsed(p);
}
// Walks start from this many plans, each adding its share of the simulations to the
// budget they share; and where the graph partitioner proposed plans, from this many of
// its stage graphs and of the chains of stages (auto's chain partitioner, or its own
// sequential proposals) too, each adding as much: so auto walks from every plan either alone
// would have (on fmnist-branch over gpu-server, auto's third start was its second's twin
// under another schedule, and the plan `--partitioner graph` walked to was never found).
constexpr std::size_t kRefineStarts = 3;
// Walks that start from plans the search pruned by their bounds (refine()).
constexpr std::size_t kSpareStarts = 4;
// Plans whose recomputation recomputeLess() trims: the best few that recompute, within
// a share of the refinement's work.
constexpr std::size_t kRecomputeTrims = 6;
constexpr int64_t kRecomputeTrimWork = kRefineWork / 2;

}  // namespace

// Simulation-guided refinement (neighbours.h): from each of a few good plans that are
// chain plans, step to the best simulated neighbour while one beats it beyond a tie,
// best first (below), within a budget of simulations shared by every start. Each step's
// plan joins the ranking.
// Neighbours are simulated by their compute bound, best first, and only while the
// bound can beat the best so far: the pruning of search().
void Explorer::refine() {
  std::vector<const Candidate*> order;
  for (const Candidate& c : result_.ranked) order.push_back(&c);
  std::stable_sort(order.begin(), order.end(),
                   [](const Candidate* a, const Candidate* b) { return a->report.throughput > b->report.throughput; });
  auto refinable = [&](const Candidate& c) {
    return chainRuns(c.plan, graph_, cluster_).has_value() || multiStageBounds(c.plan, graph_).has_value() ||
           copiedPipeline(c.plan, cluster_).has_value();
  };
  // The best of each partitioner first (a graph plan ranked below chain plans may
  // refine past them), then the next best. A plan that ties a start's throughput with its
  // stages' layer and device counts is that start on other devices (copies of a pipeline
  // proposed twice, a chain's twin listed copy by copy), and walks where it walks: the
  // next plan starts instead. (On Inception-v3 over 32 GPUs under 1f1b, twins of 2 x 16
  // took the starts from which 1 x 24 + 1 x 8 walks to the best: docs/planner.md, "Fixed
  // schedules against an oracle".)
  std::vector<const Candidate*> picked;
  auto shape = [](const plan::Plan& p) {
    std::vector<std::pair<std::size_t, std::size_t>> counts;
    for (const plan::Stage& s : p.stages) counts.emplace_back(s.layers.size(), s.devices.size());
    return counts;
  };
  auto twinOfPicked = [&](const Candidate* c) {
    return std::any_of(picked.begin(), picked.end(), [&](const Candidate* p) {
      return throughputTier(p->report) == throughputTier(c->report) && shape(p->plan) == shape(c->plan);
    });
  };
  std::set<std::string> partitioners;
  for (const Candidate* c : order)
    if (!partitioners.count(c->partitioner) && refinable(*c) && !twinOfPicked(c)) {
      partitioners.insert(c->partitioner);
      picked.push_back(c);
    }
  // A fixed schedule's proposers (chain, copies, shaped) take as many starts as auto's
  // best three: it keeps one for the next best plan too.
  const std::size_t starts_wanted = o_.schedule == "auto" ? kRefineStarts : kRefineStarts + 1;
  auto isPicked = [&](const Candidate* c) { return std::find(picked.begin(), picked.end(), c) != picked.end(); };
  for (const Candidate* c : order) {
    if (picked.size() >= starts_wanted) break;
    if (!isPicked(c) && refinable(*c) && !twinOfPicked(c)) picked.push_back(c);
  }
  // Where the graph partitioner proposed, its stage graphs walk beside the chains of
  // stages (the chain partitioner's under auto, else the graph partitioner's own
  // sequential ones): neither crowds the other's starts out.
  std::vector<std::string> proposers;
  if (graph_partitioner_) proposers = {"graph", chain_partitioner_ ? "chain" : "sequential"};
  for (const std::string& by : proposers) {
    auto own = static_cast<std::size_t>(
        std::count_if(picked.begin(), picked.end(), [&](const Candidate* c) { return c->partitioner == by; }));
    for (const Candidate* c : order)
      if (own < kRefineStarts && c->partitioner == by && !isPicked(c) && refinable(*c) && !twinOfPicked(c)) {
        picked.push_back(c);
        ++own;
      }
  }
  std::vector<Candidate> starts;  // copies: the walk adds to result_.ranked
  for (const Candidate* c : picked) starts.push_back(*c);
  const std::size_t without_spares = starts.size();
  const int spare_simulations = addSpareStarts(starts, refinable);
  // A fixed schedule's search solved one schedule's combinations where auto's solves
  // seven or more: its walks take kFixedScheduleRefinement times auto's budget.
  const int64_t scale = o_.schedule == "auto" ? 1 : kFixedScheduleRefinement;
  const int total = starts.empty() ? 0
                                   : std::min<int64_t>(scale * kRefineSimulations,
                                                       scale * kRefineWork / simulationWork(starts.front().plan));
  const int shares = static_cast<int>(std::min(starts.size(), kRefineStarts));
  // Best first: the walk at the highest throughput that can still climb takes the next
  // step, so the budget goes to the walks that lead, and a walk from a weaker start gets
  // it only once they stall. Walked in turn, each on its share, the leading walk could run
  // out while it still climbed (docs/planner.md, "Walks best first, on a budget counted in
  // actions"). A walk that lands on another's plan stops: the other walks on from there.
  // Spares add budget only where the search left fewer starts than the walks wanted.
  const auto budgeted = static_cast<int>(std::min(starts.size(), std::max(without_spares, starts_wanted)));
  int budget = starts.empty() ? 0 : std::max(0, total / shares * budgeted + total % shares - spare_simulations);
  std::vector<bool> stalled(starts.size(), false);
  std::vector<int> spent(starts.size(), 0);  // simulations each walk took
  std::vector<std::string> keys;  // each walk's current plan (planKey)
  for (const Candidate& c : starts) keys.push_back(planKey(c.plan));
  while (budget > 0) {
    int k = -1;
    for (std::size_t i = 0; i < starts.size(); ++i)
      if (!stalled[i] && (k < 0 || starts[i].report.throughput > starts[k].report.throughput)) k = static_cast<int>(i);
    if (k < 0) break;
    // A spare walks on at most one start's share: a step of a deep pipeline's walk can
    // price hundreds of neighbours (Inception-v3 in 4 stages on 32 GPUs under ZB-H1:
    // 170 simulations a step), and the walk a spare leaves no budget for may lead.
    const bool spare = static_cast<std::size_t>(k) >= without_spares;
    const int one_share = total / shares;
    int allowed = spare ? std::min(budget, std::max(0, one_share - spent[k])) : budget;
    const int before = allowed;
    std::optional<Candidate> better = stepFrom(starts[k], allowed);
    spent[k] += before - allowed;
    budget -= before - allowed;
    if (spare && spent[k] >= one_share) stalled[k] = true;
    if (!better) {
      stalled[k] = true;
      continue;
    }
    starts[k] = std::move(*better);
    keys[k] = planKey(starts[k].plan);
    for (std::size_t i = 0; i < starts.size(); ++i)
      if (static_cast<int>(i) != k && !stalled[i] && keys[i] == keys[k]) stalled[k] = true;
  }
  // A last look: the leading plan takes its moves to cheaper cuts on a budget of its own,
  // kLastLookPerStage simulations a stage. Where the budget ran out as a walk arrived, one
  // such move was left untried: Inception-v3 at 128 GPUs under pipedream, 25,062 where
  // the move gives 25,408 (docs/planner.md, "Cuts where fewer bytes cross").
  if (starts.empty()) return;
  Candidate& lead = *std::max_element(starts.begin(), starts.end(), [](const Candidate& a, const Candidate& b) {
    return a.report.throughput < b.report.throughput;
  });
  int last_look = kLastLookPerStage * lead.plan.numStages();
  while (last_look > 0) {
    std::optional<Candidate> better = stepFrom(lead, last_look, true);
    if (!better) break;
    lead = std::move(*better);
  }
}

// Plans the search's bounds pruned unsimulated may still lead somewhere (kept under a
// fixed schedule: Explorer::keepPruned): the best bounded of them whose stages hold
// other numbers of devices than every start's are simulated and join `starts` as spares
// (at most kSpareStarts); returns the simulations taken. ResNet-50 under 1F1B on 128
// GPUs walks from 120 + 56 layers on 96 + 32 GPUs, which the fill-and-drain bound put
// below the best, to the best plan the planner finds (docs/planner.md, "Bounds that
// count the fill and drain").
int Explorer::addSpareStarts(std::vector<Candidate>& starts, const std::function<bool(const Candidate&)>& refinable) {
  auto devicesPerStage = [](const plan::Plan& p) {
    std::vector<std::size_t> counts;
    for (const plan::Stage& s : p.stages) counts.push_back(s.devices.size());
    return counts;
  };
  std::set<std::vector<std::size_t>> shapes;
  for (const Candidate& c : starts) shapes.insert(devicesPerStage(c.plan));
  const std::size_t wanted = starts.size() + kSpareStarts;
  int simulations = 0;
  for (Candidate& spare : pruned_proposals_) {
    if (starts.size() >= wanted) break;
    if (!refinable(spare) || ranked_at_.count(planKey(spare.plan)) ||
        !shapes.insert(devicesPerStage(spare.plan)).second)
      continue;
    ++simulations;
    try {
      std::optional<sim::Report> report = simulate(spare.plan, 0);
      if (!report || !memoryShortfall(*report).empty()) continue;
      spare.report = std::move(*report);
    } catch (const Error&) {
      continue;
    }
    rank(spare);
    starts.push_back(std::move(spare));
  }
  pruned_proposals_.clear();
  return simulations;
}

// One step of a walk from `current`: to its best simulated neighbour beyond a tie, ranked,
// or nothing; with `cuts_only`, among its moves to cheaper cuts alone. Simulations come
// out of `budget`.
std::optional<Candidate> Explorer::stepFrom(const Candidate& current, int& budget, bool cuts_only) {
  std::optional<Candidate> better;
  bool better_ranked = false;  // `better` is already in the ranking
  // The moves to cheaper cuts first (a few a step), then the others best bound first: a
  // walk whose budget runs out within a step has tried them. Among the others, ResNet-50
  // under pipedream on 128 GPUs ran out before it reached them (docs/planner.md, "Cuts
  // where fewer bytes cross"). Taking the best of them without pricing the others, where
  // one beat the current plan, led Inception-v3 there to a plan 2.7% slower.
  auto beats = [&](double throughput) {
    return throughput > (better ? *better : current).report.throughput * std::exp(kTie);
  };
  for (const bool cheaper_cuts : {true, false}) {
    if (cuts_only && !cheaper_cuts) break;
    // Neighbours come best compute bound first. Each is named and bounded by its
    // resources (sim::throughputBound) only once it might beat the best so bounded, and
    // they are simulated best resource bound first: the compute bound does not see a
    // pipeline's fill and drain, and ordered by it, GNMT's GPipe on 128 GPUs spent the
    // whole budget, 58 simulations, on the walk's first step; now 13 (docs/planner.md,
    // "Bounds that count the fill and drain"). The resource bound is never above the
    // compute bound, so a neighbour not yet named cannot beat one bounded above it.
    const auto neighbours = neighboursOf(current.plan, cheaper_cuts);
    std::size_t next = 0;
    struct Bounded {
      double bound;
      int order;  // among equal bounds, the first named first
      std::string key;
      Candidate candidate;
    };
    auto lower = [](const Bounded& a, const Bounded& b) {
      return a.bound != b.bound ? a.bound < b.bound : a.order > b.order;
    };
    std::vector<Bounded> bounded;  // a heap: the highest resource bound on top
    std::set<std::string> named;
    auto nameNext = [&] {
      plan::Plan p = neighbours[next++].second();
      const std::string key = planKey(p);
      if (!named.insert(key).second) return;
      if (seen_.count(key)) {
        // Simulated already, by the search or another walk: a step to it costs nothing.
        const auto known = ranked_at_.find(key);
        if (known != ranked_at_.end() && beats(result_.ranked[known->second].report.throughput)) {
          better = result_.ranked[known->second];
          better_ranked = true;
        }
        return;
      }
      Candidate c{std::move(p), {}, 0, 0, "refined"};
      recomputeAsAsked(c.plan);
      try {
        plan::validate(c.plan, graph_, cluster_, "candidate", std::vector<int64_t>(c.plan.numStages(), 0));
        const double resources = resourceBound(c.plan);
        if (beats(resources)) {
          bounded.push_back({resources, static_cast<int>(next), key, std::move(c)});
          std::push_heap(bounded.begin(), bounded.end(), lower);
          return;
        }
      } catch (const Error&) {
        // e.g. a Program the validator refuses: never simulated
      }
      seen_.insert(key);
    };
    while (budget > 0) {
      while (next < neighbours.size() && beats(neighbours[next].first) &&
             (bounded.empty() || neighbours[next].first > bounded.front().bound))
        nameNext();
      if (bounded.empty() || !beats(bounded.front().bound)) break;
      std::pop_heap(bounded.begin(), bounded.end(), lower);
      Candidate c = std::move(bounded.back().candidate);
      seen_.insert(std::move(bounded.back().key));
      bounded.pop_back();
      const double to_beat = (better ? *better : current).report.throughput;
      try {
        --budget;
        std::optional<sim::Report> report = simulate(c.plan, to_beat * std::exp(kTie));
        if (!report) continue;
        c.report = std::move(*report);
      } catch (const Error&) {
        continue;
      }
      if (memoryShortfall(c.report).empty() && tiedLayersApart(c.plan, o_.tied_layers).empty() &&
          c.report.throughput > to_beat * std::exp(kTie)) {
        better = std::move(c);
        better_ranked = false;
      }
    }
    // Bounded below the best found: never to be simulated from here.
    if (budget > 0)
      for (const Bounded& b : bounded) seen_.insert(b.key);
  }
  if (better && !better_ranked) {
    better->depth = schedule::pipelineDepth(plan::stageDag(better->plan, graph_));
    rank(*better);
  }
  return better;
}

// Selective recomputation (AdaPipe's point) on the best plans that recompute under auto:
// where every layer of a recomputing stage fits, fewer may too, for less time. Bisects on
// the share of each such stage's layers that recompute, in quarters (a half, then a
// quarter or three), simulating each try; the fewest that fit, if faster, join the
// ranking as a plan of their own. Done once on the best few rather than in every
// simulation: a try costs a simulation, and most plans never come near the top.
void Explorer::recomputeLess() {
  if (o_.recompute != Recompute::kAuto) return;
  std::vector<const Candidate*> order;
  for (const Candidate& c : result_.ranked)
    if (!plan::recomputedStages(c.plan).empty()) order.push_back(&c);
  std::stable_sort(order.begin(), order.end(),
                   [](const Candidate* a, const Candidate* b) { return a->report.throughput > b->report.throughput; });
  std::vector<Candidate> starts;  // copies: the trims join result_.ranked
  for (std::size_t k = 0; k < order.size() && k < kRecomputeTrims; ++k) starts.push_back(*order[k]);
  int64_t work = 0;
  for (const Candidate& start : starts) {
    if ((work += 2 * simulationWork(start.plan)) > kRecomputeTrimWork) break;
    std::optional<Candidate> best;
    int low = 0, high = 4;  // quarters: `high` fits, `low` is not known to
    while (high - low > 1) {
      const int mid = (low + high) / 2;
      Candidate fewer = start;
      bool trimmed = false;
      for (plan::Stage& s : fewer.plan.stages) {
        const int layers = static_cast<int>(s.layers.size());
        const int k = (layers * mid + 3) / 4;  // at least one
        if (s.recompute && s.recompute_layers == 0 && k < layers) s.recompute_layers = k, trimmed = true;
      }
      if (!trimmed) break;  // stages of one layer: nothing to trim
      const double to_beat = (best ? *best : start).report.throughput;
      std::optional<sim::Report> r = sim::predictReportAbove(graph_, cluster_, fewer.plan, to_beat * std::exp(kTie));
      if (r && memoryShortfall(*r).empty() && r->throughput > to_beat * std::exp(kTie)) {
        high = mid;
        fewer.report = std::move(*r);
        best = std::move(fewer);
      } else {
        low = mid;
      }
    }
    if (best) rank(std::move(*best));
  }
}

// The neighbours of a refinable plan (neighbours.h), each with its compute bound, best
// bound first; or, with `cheaper_cuts`, only a chain's (or its copies') moves to cheaper
// cuts (cheaperCutRuns).
std::vector<std::pair<double, std::function<plan::Plan()>>> Explorer::neighboursOf(const plan::Plan& plan,
                                                                                   bool cheaper_cuts) const {
  std::vector<std::pair<double, std::function<plan::Plan()>>> out;
  if (const std::optional<ChainRuns> runs = chainRuns(plan, graph_, cluster_)) {
    addChainNeighbours(out, plan, *runs, 1, cluster_.size(), cheaper_cuts);
  } else if (const std::optional<CopiedPipeline> copied = copiedPipeline(plan, cluster_)) {
    // Copies of a pipeline (replicated_pipeline.h): its neighbours within its block,
    // copied; and, where the copies pair up, those of half as many copies of the
    // pipeline with twice the replicas per stage, on blocks twice as wide: there a
    // device boundary moves by half a replica of the narrower block (16 copies of 1 + 1
    // devices cannot become 8 copies of 3 + 1 otherwise).
    const std::optional<ChainRuns> runs = chainRuns(copied->pipeline, graph_, cluster_);
    if (!runs) return out;
    addChainNeighbours(out, copied->pipeline, *runs, copied->copies, copied->width, cheaper_cuts);
    if (copied->copies % 2 == 0 && !cheaper_cuts) {
      ChainRuns wider = *runs;
      for (int& d : wider.device) d *= 2;
      plan::Plan pipeline = copied->pipeline;
      pipeline.microbatches *= 2;
      pipeline.stages.clear();
      addChainNeighbours(out, planOfRuns(pipeline, wider, graph_, cluster_), wider, copied->copies / 2,
                         2 * copied->width, false);
    }
  } else if (const std::optional<std::vector<int>> bounds = multiStageBounds(plan, graph_); bounds && !cheaper_cuts) {
    for (plan::Plan& p : multiStageNeighbours(plan, *bounds, graph_)) {
      const double bound = resourceBound(p);
      out.emplace_back(bound, [p = std::move(p)] { return p; });
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

// The neighbours of `copies` copies of the chain `pipeline` (whose runs are `runs`) on
// blocks of `width` devices: its neighbours that stay in its block, copied (one copy on
// the whole cluster: a chain plan's own), or only its moves to cheaper cuts. A chain's
// are priced as runs and named as plans only when simulated.
void Explorer::addChainNeighbours(std::vector<std::pair<double, std::function<plan::Plan()>>>& out,
                                  const plan::Plan& pipeline, const ChainRuns& runs, int copies, int width,
                                  bool cheaper_cuts) const {
  auto shell = std::make_shared<plan::Plan>(pipeline);
  shell->stages.clear();
  const int max_replicas = o_.max_replicas == 0 ? 0 : std::max(1, o_.max_replicas / copies);
  std::vector<ChainRuns> moves;
  if (cheaper_cuts) {
    if (crossing_.empty()) crossing_ = crossingBytes(graph_);
    moves = cheaperCutRuns(pipeline, runs, cluster_, {crossing_, workPrefix(pipeline.microbatch_size)}, max_replicas);
  } else {
    moves = neighbourRuns(pipeline, runs, cluster_, max_replicas);
  }
  for (ChainRuns& r : moves)
    if (o_.use_all_devices ? r.device.back() == width : r.device.back() <= width) {
      const double bound = copies * computeBound(*shell, r);
      out.emplace_back(bound, [this, shell, copies, width, r = std::move(r)] {
        return replicatePipeline(planOfRuns(*shell, r, graph_, cluster_), copies, width, cluster_);
      });
    }
}

}  // namespace pipetrain::planner::detail
