// Zero-bubble list scheduling (ZB-H2, ZB-V); see generator_parts.h.
#include <deque>
#include <functional>
#include <limits>

#include "generator_parts.h"
#include "pipetrain/util/error.h"

namespace pipetrain::schedule::detail {
namespace {

constexpr int kNotYet = std::numeric_limits<int>::max();

// Longest path from a source, in stages: it breaks ties between a rank's stages.
std::vector<int> heights(const Program& p) {
  std::vector<int> h(p.num_stages, -1);
  std::function<int(int)> visit = [&](int s) {
    if (h[s] >= 0) return h[s];
    int best = 0;
    for (int q : p.stage_preds[s]) best = std::max(best, visit(q) + 1);
    return h[s] = best;
  };
  for (int s = 0; s < p.num_stages; ++s) visit(s);
  return h;
}

// One stage replica on its rank: its micro-batches in order and how far it has got.
struct Lane {
  int stage = 0;
  std::vector<int> mbs;
  std::size_t next_f = 0, next_i = 0;
  std::deque<int> deferred_w;      // micro-batches whose I ran and W did not
  std::vector<int> w_left;         // per mini-batch: W passes still to run
  int stepped = 0;                 // mini-batches stepped
};

}  // namespace

std::vector<std::vector<Action>> zeroBubbleListSchedule(const Program& p, int activation_limit) {
  const int total = p.totalMicrobatches(), m = p.microbatches;
  const std::vector<int> height = heights(p);
  auto at = [&](int s, int j) { return static_cast<std::size_t>(s) * total + j; };
  std::vector<int> f_done(at(p.num_stages, 0), kNotYet), i_done(f_done.size(), kNotYet);

  std::vector<std::vector<Lane>> lanes(p.numRanks());
  for (int s = 0; s < p.num_stages; ++s)
    for (int r : p.stage_ranks[s]) {
      Lane lane;
      lane.stage = s;
      for (int j = 0; j < total; ++j)
        if (p.rankOf(s, j) == r) lane.mbs.push_back(j);
      lane.w_left.assign(p.minibatches, 0);
      for (int j : lane.mbs) ++lane.w_left[j / m];
      lanes[r].push_back(std::move(lane));
    }
  std::vector<int> held(p.numRanks(), 0);
  std::vector<std::vector<Action>> out(p.numRanks());
  std::size_t remaining = 0;
  for (const auto& rank_lanes : lanes)
    for (const Lane& l : rank_lanes) remaining += 3 * l.mbs.size();

  auto inputReady = [&](const Lane& l, int t) {
    if (l.next_f >= l.mbs.size()) return false;
    const int j = l.mbs[l.next_f];
    if (j / m > l.stepped) return false;  // the stage has not stepped the previous mini-batch
    for (int q : p.stage_preds[l.stage])
      if (f_done[at(q, j)] > t) return false;
    return true;
  };
  auto gradientReady = [&](const Lane& l, int t) {
    if (l.next_i >= l.next_f) return false;
    const int j = l.mbs[l.next_i];
    if (f_done[at(l.stage, j)] > t) return false;
    for (int q : p.stage_succs[l.stage])
      if (i_done[at(q, j)] > t) return false;
    return true;
  };
  // The lane a rank serves: ready I first (nearest the input first: its gradient has the
  // least left to travel), then F under the limit (furthest along first), then the
  // oldest W. On V layouts these tie-breaks measured the smallest bubble of the four.
  auto choose = [&](int r, int t) -> std::pair<ActionType, Lane*> {
    Lane* best = nullptr;
    for (Lane& l : lanes[r])
      if (gradientReady(l, t) && (!best || height[l.stage] < height[best->stage])) best = &l;
    if (best) return {ActionType::I, best};
    if (held[r] < activation_limit)
      for (Lane& l : lanes[r])
        if (inputReady(l, t) && (!best || height[l.stage] > height[best->stage])) best = &l;
    if (best) return {ActionType::F, best};
    for (Lane& l : lanes[r])
      if (!l.deferred_w.empty() && (!best || l.deferred_w.front() < best->deferred_w.front())) best = &l;
    return {ActionType::W, best};
  };

  for (int t = 0; remaining > 0; ++t) {
    bool moved = false;
    std::vector<std::pair<ActionType, Lane*>> picks(p.numRanks());
    for (int r = 0; r < p.numRanks(); ++r) picks[r] = choose(r, t);
    // Apply after every rank chose, so that a slot's results are seen from the next slot.
    for (int r = 0; r < p.numRanks(); ++r) {
      auto [type, lane] = picks[r];
      if (!lane) continue;
      moved = true;
      --remaining;
      const int s = lane->stage;
      if (type == ActionType::F) {
        const int j = lane->mbs[lane->next_f++];
        f_done[at(s, j)] = t + 1;
        ++held[r];
        out[r].push_back(computeAction(ActionType::F, s, j, j / m));
      } else if (type == ActionType::I) {
        const int j = lane->mbs[lane->next_i++];
        i_done[at(s, j)] = t + 1;
        lane->deferred_w.push_back(j);
        out[r].push_back(computeAction(ActionType::I, s, j, j / m));
      } else {
        const int j = lane->deferred_w.front();
        lane->deferred_w.pop_front();
        --held[r];
        out[r].push_back(computeAction(ActionType::W, s, j, j / m));
        if (--lane->w_left[j / m] == 0) {
          if (p.stage_ranks[s].size() > 1) out[r].push_back(allReduceAction(s));
          out[r].push_back(stepAction(s, ++lane->stepped));
        }
      }
    }
    if (!moved)
      throw Error("zero-bubble list scheduling is stuck at slot " + std::to_string(t) + ": an activation limit of " +
                  std::to_string(activation_limit) + " stages is too small for this pipeline");
  }
  return out;
}

}  // namespace pipetrain::schedule::detail
