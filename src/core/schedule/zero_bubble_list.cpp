// Zero-bubble list scheduling (ZB-H2); see generator_parts.h.
#include <deque>
#include <limits>

#include "generator_parts.h"
#include "pipetrain/util/error.h"

namespace pipetrain::schedule::detail {
namespace {

constexpr int kNotYet = std::numeric_limits<int>::max();

// A rank: the stage replica it runs, its micro-batches in order and how far it has got.
struct Lane {
  int stage = -1;
  std::vector<int> mbs;
  std::size_t next_f = 0, next_i = 0;
  std::deque<int> deferred_w;  // micro-batches whose I ran and W did not
  std::vector<int> w_left;     // per mini-batch: W passes still to run
  int stepped = 0;             // mini-batches stepped
  int held = 0;                // activations held: F run, W not yet
};

}  // namespace

std::vector<std::vector<Action>> zeroBubbleListSchedule(const Program& p, int activation_limit) {
  const int total = p.totalMicrobatches(), m = p.microbatches;
  auto at = [&](int s, int j) { return static_cast<std::size_t>(s) * total + j; };
  std::vector<int> f_done(at(p.num_stages, 0), kNotYet), i_done(f_done.size(), kNotYet);

  std::vector<Lane> lanes(p.numRanks());
  std::size_t remaining = 0;
  for (int s = 0; s < p.num_stages; ++s)
    for (std::size_t k = 0; k < p.stage_ranks[s].size(); ++k) {
      const int r = p.stage_ranks[s][k];
      Lane& lane = lanes[r];
      if (lane.stage >= 0) throw Error("internal: zero-bubble list scheduling runs one stage per rank");
      lane.stage = s;
      // Replica k runs every count-th micro-batch from k (Program::rankOf).
      for (std::size_t j = k; j < static_cast<std::size_t>(total); j += p.stage_ranks[s].size())
        lane.mbs.push_back(static_cast<int>(j));
      lane.w_left.assign(p.minibatches, 0);
      for (int j : lane.mbs) ++lane.w_left[j / m];
      remaining += 3 * lane.mbs.size();
    }

  auto inputReady = [&](const Lane& l, int t) {
    if (l.next_f >= l.mbs.size() || l.held >= activation_limit) return false;
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

  std::vector<std::vector<Action>> out(p.numRanks());
  for (int t = 0; remaining > 0; ++t) {
    // Every rank chooses from what slot t sees, then all run: results show from t + 1.
    std::vector<ActionType> picks(p.numRanks(), ActionType::kCount);
    for (int r = 0; r < p.numRanks(); ++r) {
      const Lane& l = lanes[r];
      if (gradientReady(l, t)) picks[r] = ActionType::I;
      else if (inputReady(l, t)) picks[r] = ActionType::F;
      else if (!l.deferred_w.empty()) picks[r] = ActionType::W;
    }
    bool moved = false;
    for (int r = 0; r < p.numRanks(); ++r) {
      Lane& l = lanes[r];
      const int s = l.stage;
      switch (picks[r]) {
        case ActionType::F: {
          const int j = l.mbs[l.next_f++];
          f_done[at(s, j)] = t + 1;
          ++l.held;
          out[r].push_back(computeAction(ActionType::F, s, j, j / m));
          break;
        }
        case ActionType::I: {
          const int j = l.mbs[l.next_i++];
          i_done[at(s, j)] = t + 1;
          l.deferred_w.push_back(j);
          out[r].push_back(computeAction(ActionType::I, s, j, j / m));
          break;
        }
        case ActionType::W: {
          const int j = l.deferred_w.front();
          l.deferred_w.pop_front();
          --l.held;
          out[r].push_back(computeAction(ActionType::W, s, j, j / m));
          if (--l.w_left[j / m] == 0) {
            if (p.stage_ranks[s].size() > 1) out[r].push_back(allReduceAction(s));
            out[r].push_back(stepAction(s, ++l.stepped));
          }
          break;
        }
        default: continue;  // idle this slot
      }
      moved = true;
      --remaining;
    }
    if (!moved)
      throw Error("zero-bubble list scheduling is stuck at slot " + std::to_string(t) + ": an activation limit of " +
                  std::to_string(activation_limit) + " micro-batches is too small for this pipeline");
  }
  return out;
}

}  // namespace pipetrain::schedule::detail
