// DeepSeek's DualPipeV (the V-shaped, "cut-in-half" DualPipe), per rank. Rank r runs
// stage r (the "down" chunk) and stage 2p-1-r (the "up" chunk). Its list has DeepSeek's
// eight phases; the counts make every phase line up with its neighbours' so that, with
// equal chunk times, a rank rarely waits:
//   1  2(p-r-1) x F down                          fill the V from the top
//   2  (r+1)    x F down, F up
//   3  (p-r-1)  x B up (I then W), F up           split so the gradient leaves early
//   4  m-2p+r+1 x (F down & B up), (F up & B down) overlapped pairs: the steady state
//   5  (p-r-1)  x B up, (F up & B down)
//   6  (r+1)    x B up, B down                    from its middle on, backward runs I
//                                                 only and defers W (zero bubble)
//   7  (p-r-1)  x deferred W, I down (W deferred)
//   8  the deferred W passes
#include <deque>

#include "generator_parts.h"

namespace pipetrain::schedule::detail {
namespace {

class RankList {
 public:
  RankList(int rank, int ranks, int first_mb, int version)
      : stage_{rank, 2 * ranks - 1 - rank}, next_f_{first_mb, first_mb}, next_b_{first_mb, first_mb},
        version_(version) {}

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
  void splitBackward(int chunk) {
    backward(chunk, true);
    weight();
  }
  // F of `forward_chunk` computed together with the whole B of the other chunk.
  void overlapped(int forward_chunk) {
    forward(forward_chunk);
    out_.back().overlap_next = true;
    backward(1 - forward_chunk, false);
  }
  void weight() {
    if (deferred_.empty()) return;
    out_.push_back(deferred_.front());
    deferred_.pop_front();
  }
  std::vector<Action> finish() {
    while (!deferred_.empty()) weight();
    for (int s : stage_) out_.push_back(stepAction(s, version_ + 1));
    return std::move(out_);
  }

 private:
  int stage_[2];
  int next_f_[2], next_b_[2];
  int version_;
  std::deque<Action> deferred_;
  std::vector<Action> out_;
};

constexpr int kDown = 0, kUp = 1;

}  // namespace

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
