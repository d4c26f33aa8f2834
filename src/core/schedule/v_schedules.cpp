// The V schedules, per rank. Rank r of p runs stage r (the "down" chunk) and stage
// 2p-1-r (the "up" chunk), so a micro-batch goes down the ranks and back up, and the
// turn at rank p-1 needs no transfer.
//
// ZB-V (the zero-bubble paper's V schedule; PyTorch's ScheduleZBVZeroBubble has the
// same phases): with equal F, I and W it keeps every rank busy in the steady state while
// holding 2p chunks' activations, which is 1F1B's p micro-batches:
//   2(p-r)-1 x F down;  r x (F up, F down);  p-r x (F up, I up, W up)
//   until every forward ran: (F down while any is left, I down, W down, F up, I up, W up)
//   r x (I down, I up);  p-r x (I down, W down);  the deferred W passes, up chunk first
//
// DualPipeV (DeepSeek's "cut-in-half" DualPipe), in DeepSeek's eight phases:
//   1  2(p-r-1) x F down                          fill the V from the top
//   2  (r+1)    x F down, F up
//   3  (p-r-1)  x B up (I then W), F up           split so the gradient leaves early
//   4  m-2p+r+1 x (F down & B up), (F up & B down) overlapped pairs: the steady state
//   5  (p-r-1)  x B up, (F up & B down)
//   6  (r+1)    x B up, B down                    from its middle on, backward runs I
//                                                 only and defers W (zero bubble)
//   7  (p-r-1)  x deferred W, I down (W deferred)
//   8  the deferred W passes
#include <algorithm>
#include <deque>

#include "generator_parts.h"

namespace pipetrain::schedule::detail {
namespace {

// One rank's list for one mini-batch, built phase by phase.
class RankList {
 public:
  RankList(int rank, int ranks, int first_mb, int version)
      : stage_{rank, 2 * ranks - 1 - rank}, first_(first_mb), next_f_{first_mb, first_mb},
        next_b_{first_mb, first_mb}, version_(version) {}

  int forwardsDone(int chunk) const { return next_f_[chunk] - first_; }

  void forward(int chunk) { out_.push_back(computeAction(ActionType::F, stage_[chunk], next_f_[chunk]++, version_)); }
  // A whole backward, or with `zero_bubble` its I pass now and its W pass deferred.
  void backward(int chunk, bool zero_bubble) {
    const int s = stage_[chunk], j = next_b_[chunk]++;
    if (!zero_bubble) {
      out_.push_back(computeAction(ActionType::B, s, j, version_));
      return;
    }
    out_.push_back(computeAction(ActionType::I, s, j, version_));
    deferred_.push_back(computeAction(ActionType::W, s, j, version_));
  }
  // I then W at once: the input gradient leaves before the weight pass runs.
  void splitBackward(int chunk) {
    const int s = stage_[chunk], j = next_b_[chunk]++;
    out_.push_back(computeAction(ActionType::I, s, j, version_));
    out_.push_back(computeAction(ActionType::W, s, j, version_));
  }
  // F of `forward_chunk` computed together with the whole B of the other chunk.
  void overlapped(int forward_chunk) {
    forward(forward_chunk);
    out_.back().overlap_next = true;
    backward(1 - forward_chunk, false);
  }
  // The oldest deferred W pass (of `chunk`, or of either when -1).
  void weight(int chunk = -1) {
    for (auto it = deferred_.begin(); it != deferred_.end(); ++it)
      if (chunk < 0 || it->stage == stage_[chunk]) {
        out_.push_back(*it);
        deferred_.erase(it);
        return;
      }
  }
  void weights(int chunk) {
    while (std::any_of(deferred_.begin(), deferred_.end(), [&](const Action& a) { return a.stage == stage_[chunk]; }))
      weight(chunk);
  }
  std::vector<Action> finish() {
    while (!deferred_.empty()) weight();
    for (int s : stage_) out_.push_back(stepAction(s, version_ + 1));
    return std::move(out_);
  }

 private:
  int stage_[2];
  int first_;  // the mini-batch's first micro-batch
  int next_f_[2], next_b_[2];
  int version_;
  std::deque<Action> deferred_;
  std::vector<Action> out_;
};

constexpr int kDown = 0, kUp = 1;

}  // namespace

std::vector<Action> zeroBubbleVRank(int r, int p, int m, int minibatches) {
  // Fewer micro-batches than the warm-up wants: plan 2p-1 and drop the ones that do not
  // exist, which keeps the order of the rest (and so its dependencies) intact.
  const int n = std::max(m, 2 * p - 1);
  std::vector<Action> out;
  for (int k = 0; k < minibatches; ++k) {
    const int first = k * m;
    RankList l(r, p, first, k);
    for (int i = 0; i < 2 * (p - r) - 1; ++i) l.forward(kDown);
    for (int i = 0; i < r; ++i) {
      l.forward(kUp);
      l.forward(kDown);
    }
    for (int i = 0; i < p - r; ++i) {
      l.forward(kUp);
      l.splitBackward(kUp);
    }
    while (l.forwardsDone(kUp) < l.forwardsDone(kDown) || l.forwardsDone(kDown) < n) {
      if (l.forwardsDone(kDown) < n) l.forward(kDown);
      l.splitBackward(kDown);
      l.forward(kUp);
      l.splitBackward(kUp);
    }
    for (int i = 0; i < r; ++i) {
      l.backward(kDown, true);
      l.backward(kUp, true);
    }
    for (int i = 0; i < p - r; ++i) {
      l.backward(kDown, true);
      l.weight(kDown);
    }
    l.weights(kUp);
    for (const Action& a : l.finish())
      if (a.type == ActionType::STEP || a.microbatch < first + m) out.push_back(a);
  }
  return out;
}

std::vector<Action> dualPipeVRank(int r, int p, int m, int minibatches) {
  std::vector<Action> out;
  for (int k = 0; k < minibatches; ++k) {
    RankList l(r, p, k * m, k);
    for (int i = 0; i < 2 * (p - r - 1); ++i) l.forward(kDown);
    for (int i = 0; i < r + 1; ++i) {
      l.forward(kDown);
      l.forward(kUp);
    }
    for (int i = 0; i < p - r - 1; ++i) {
      l.splitBackward(kUp);
      l.forward(kUp);
    }
    for (int i = 0; i < m - 2 * p + r + 1; ++i) {
      l.overlapped(kDown);
      l.overlapped(kUp);
    }
    for (int i = 0; i < p - r - 1; ++i) {
      l.backward(kUp, false);
      l.overlapped(kUp);
    }
    // Phase 6: odd ranks start deferring W one backward earlier than even ranks, which
    // staggers the tail so that neighbours' deferred passes interleave.
    bool zero_bubble = false;
    for (int i = 0; i < r + 1; ++i) {
      if (i == (r + 1) / 2 && r % 2 == 1) zero_bubble = true;
      l.backward(kUp, zero_bubble);
      if (i == (r + 1) / 2 && r % 2 == 0) zero_bubble = true;
      l.backward(kDown, zero_bubble);
    }
    for (int i = 0; i < p - r - 1; ++i) {
      l.weight();
      l.backward(kDown, true);
    }
    const std::vector<Action> mini = l.finish();
    out.insert(out.end(), mini.begin(), mini.end());
  }
  return out;
}

}  // namespace pipetrain::schedule::detail
