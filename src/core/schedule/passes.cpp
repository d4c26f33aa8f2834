#include "pipetrain/schedule/passes.h"

#include <algorithm>

#include "pipetrain/util/error.h"

namespace pipetrain::schedule {

Program lower(const Program& compute_only) {
  Program out = compute_only;
  for (int r = 0; r < compute_only.numRanks(); ++r) {
    // The receives before (or sends after) an action that consumes or makes data:
    // activations come from predecessors and go to successors, gradients the other way.
    auto addComm = [&](const Action& a, bool receives, std::vector<Action>& out_actions) {
      const bool forward = a.type == ActionType::F;
      if (!forward && a.type != ActionType::B && a.type != ActionType::I) return;
      const ActionType type = receives ? (forward ? ActionType::RECV_F : ActionType::RECV_B)
                                       : (forward ? ActionType::SEND_F : ActionType::SEND_B);
      const bool predecessors = forward == receives;
      for (int q : predecessors ? compute_only.stage_preds[a.stage] : compute_only.stage_succs[a.stage])
        if (compute_only.rankOf(q, a.microbatch) != r) out_actions.push_back(commAction(type, a.stage, a.microbatch, q));
    };
    const auto& in = compute_only.ranks[r];
    std::vector<Action> actions;
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (isComm(in[i].type))
        throw Error("lower: rank " + std::to_string(r) + " already has communication (" + toString(in[i]) + ")");
      // An overlapped pair starts when the inputs of both halves are here and sends both
      // results after it: the receives go before the pair, the sends after it.
      const std::size_t n = in[i].overlap_next && i + 1 < in.size() ? 2 : 1;
      for (std::size_t k = i; k < i + n; ++k) addComm(in[k], /*receives=*/true, actions);
      for (std::size_t k = i; k < i + n; ++k) actions.push_back(in[k]);
      for (std::size_t k = i; k < i + n; ++k) addComm(in[k], /*receives=*/false, actions);
      i += n - 1;
    }
    out.ranks[r] = std::move(actions);
  }
  return out;
}

Program forwardOnly(const Program& program) {
  Program out = program;
  out.schedule = program.schedule + " (forward only)";
  out.minibatches = 1;
  out.microbatches = program.totalMicrobatches();
  for (auto& actions : out.ranks) {
    std::vector<Action> kept;
    for (Action a : actions) {
      if (a.type != ActionType::F && a.type != ActionType::SEND_F && a.type != ActionType::RECV_F) continue;
      if (a.type == ActionType::F) {
        a.version = 0;
        a.overlap_next = false;  // its backward half is gone
      }
      kept.push_back(a);
    }
    actions = std::move(kept);
  }
  return out;
}

}  // namespace pipetrain::schedule
