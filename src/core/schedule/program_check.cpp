#include "pipetrain/schedule/program_check.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "pipetrain/util/error.h"

namespace pipetrain::schedule {
namespace {


class Checker {
 public:
  Checker(const Program& p, const ActionLocator& where) : p_(p), where_(where), messages_(p) {}

  void run() {
    checkShape();
    checkStatic();
    execute();
  }

 private:
  [[noreturn]] void fail(int rank, int pos, const std::string& why) const {
    const auto& actions = p_.ranks[rank];
    std::string context;
    const int from = std::max(0, pos - 6), to = std::min<int>(actions.size(), pos + 7);
    if (from > 0) context += " ...";
    for (int i = from; i < to; ++i) {
      const std::string text = toString(actions[i]);
      context += " " + (i == pos ? "[" + text + "]" : text);
    }
    if (to < static_cast<int>(actions.size())) context += " ...";
    throw Error("schedule \"" + p_.schedule + "\": rank " + std::to_string(rank) + ", action " +
                std::to_string(pos) + " (" + describe(actions[pos]) + "): " + why + "\n  rank " +
                std::to_string(rank) + ":" + context);
  }

  // An action's text, and where its author wrote it when the locator knows.
  std::string describe(const Action& a) const {
    const std::string at = where_ ? where_(a) : "";
    return toString(a) + (at.empty() ? "" : ", " + at);
  }

  void checkShape() const {
    const int n = p_.num_stages;
    if (n < 1) throw Error("schedule \"" + p_.schedule + "\": no stages");
    if (static_cast<int>(p_.stage_ranks.size()) != n || static_cast<int>(p_.stage_preds.size()) != n ||
        static_cast<int>(p_.stage_succs.size()) != n)
      throw Error("schedule \"" + p_.schedule + "\": stage tables do not match " + std::to_string(n) + " stages");
    for (int s = 0; s < n; ++s) {
      if (p_.stage_ranks[s].empty()) throw Error("stage " + std::to_string(s) + " runs on no rank");
      for (int r : p_.stage_ranks[s])
        if (r < 0 || r >= p_.numRanks())
          throw Error("stage " + std::to_string(s) + " runs on rank " + std::to_string(r) + ", which does not exist");
    }
  }

  // Everything that does not depend on timing: ranges, ownership, counts, matching.
  void checkStatic() {
    const int n = p_.num_stages, total = p_.totalMicrobatches();
    // occurrences of each compute type, indexed [type][stage * total + mb]
    static_assert(static_cast<int>(ActionType::F) == 0 && static_cast<int>(ActionType::W) == 3,
                  "compute types come first in ActionType");
    std::vector<std::vector<int>> count(4, std::vector<int>(static_cast<std::size_t>(n) * total, 0));
    // by message (MessageIndex): (rank, position), or rank -1 where none
    std::vector<std::pair<int, int>> sends(messages_.size(), {-1, 0}), recvs(messages_.size(), {-1, 0});
    // Each stage's ranks, sorted once: a STEP on each of 8192 replicas searched them all.
    std::vector<std::vector<int>> sorted_owners = p_.stage_ranks;
    for (auto& owners : sorted_owners) std::sort(owners.begin(), owners.end());
    for (int r = 0; r < p_.numRanks(); ++r) {
      for (int i = 0; i < static_cast<int>(p_.ranks[r].size()); ++i) {
        const Action& a = p_.ranks[r][i];
        if (a.stage < 0 || a.stage >= n) fail(r, i, "stage out of range (the pipeline has " + std::to_string(n) + ")");
        if (a.overlap_next) {
          const bool pair = a.type == ActionType::F && i + 1 < static_cast<int>(p_.ranks[r].size()) &&
                            p_.ranks[r][i + 1].type == ActionType::B;
          if (!pair) fail(r, i, "only a forward pass directly followed by a full backward (B) can be overlapped");
        }
        if (a.type == ActionType::STEP || a.type == ActionType::ALLREDUCE) {
          const auto& owners = sorted_owners[a.stage];
          if (!std::binary_search(owners.begin(), owners.end(), r)) fail(r, i, "this rank does not run the stage");
          if (a.type == ActionType::STEP && a.version < 1) fail(r, i, "a STEP must name the version it creates (v1, v2, ...)");
          continue;
        }
        if (a.microbatch < 0 || a.microbatch >= total)
          fail(r, i, "micro-batch out of range (the program runs " + std::to_string(total) + ")");
        if (p_.rankOf(a.stage, a.microbatch) != r)
          fail(r, i, "this micro-batch of the stage belongs to rank " + std::to_string(p_.rankOf(a.stage, a.microbatch)));
        if (isCompute(a.type)) {
          if (a.version < 0) fail(r, i, "a compute action must name the weight version it reads");
          ++count[static_cast<int>(a.type)][static_cast<std::size_t>(a.stage) * total + a.microbatch];
          continue;
        }
        // communication
        const auto [backward, producer, consumer, mb] = messageOf(a);
        (void)backward;
        if (producer < 0 || producer >= n || consumer < 0 || consumer >= n) fail(r, i, "peer stage out of range");
        const auto& succs = p_.stage_succs[producer];
        if (std::find(succs.begin(), succs.end(), consumer) == succs.end())
          fail(r, i, "stage " + std::to_string(consumer) + " does not consume stage " + std::to_string(producer));
        auto& table = isSend(a.type) ? sends : recvs;
        const std::size_t key = messages_.of(a);
        if (table[key].first >= 0)
          fail(r, i, "duplicate; the same message also appears on rank " + std::to_string(table[key].first));
        table[key] = {r, i};
        const int peer_rank = p_.rankOf(a.peer_stage, mb);
        if (peer_rank == r) fail(r, i, "both stages run on this rank, no communication is needed");
      }
    }
    auto occurrences = [&](ActionType t, int s, int j) {
      return count[static_cast<int>(t)][static_cast<std::size_t>(s) * total + j];
    };
    for (int s = 0; s < n; ++s)
      for (int j = 0; j < total; ++j) {
        // Messages are built on failure only: building them for every (stage,
        // micro-batch) cost more than the checks.
        auto prefix = [&] {
          return "schedule \"" + p_.schedule + "\": stage " + std::to_string(s) + ", micro-batch " + std::to_string(j);
        };
        const int f = occurrences(ActionType::F, s, j), b = occurrences(ActionType::B, s, j),
                  in = occurrences(ActionType::I, s, j), w = occurrences(ActionType::W, s, j);
        if (f != 1) throw Error(prefix() + " has " + std::to_string(f) + " forward passes (F), expected 1");
        const bool whole = b == 1 && in == 0 && w == 0;
        const bool split = b == 0 && in == 1 && w == 1;
        if (!whole && !split)
          throw Error(prefix() + " needs one B, or one I and one W; found " + std::to_string(b) + " B, " +
                      std::to_string(in) + " I, " + std::to_string(w) + " W");
      }
    for (std::size_t key = 0; key < sends.size(); ++key)
      if (sends[key].first >= 0 && recvs[key].first < 0)
        fail(sends[key].first, sends[key].second, "no rank receives this message");
    for (std::size_t key = 0; key < recvs.size(); ++key)
      if (recvs[key].first >= 0 && sends[key].first < 0)
        fail(recvs[key].first, recvs[key].second, "no rank sends this message");
  }

  // Symbolic execution: RECV waits for its SEND, ALLREDUCE for all replicas; everything
  // else must already have its inputs, since a rank runs its list in order.
  void execute() {
    const int n = p_.num_stages, total = p_.totalMicrobatches();
    auto idx = [total](int s, int j) { return static_cast<std::size_t>(s) * total + j; };
    std::vector<char> forward(n * static_cast<std::size_t>(total)), input_grad(forward.size()), weight_grad(forward.size());
    std::vector<int> f_version(forward.size(), -1), i_version(forward.size(), -1);
    std::vector<char> sent(messages_.size()), received(messages_.size());  // by message
    std::vector<std::vector<int>> latest(p_.numRanks(), std::vector<int>(n, 0));
    // ALLREDUCE rendezvous: (stage, k-th) -> replicas arrived
    std::map<std::pair<int, int>, int> arrived;
    std::vector<std::map<int, int>> reduces_done(p_.numRanks());  // rank -> stage -> count
    std::vector<char> waiting_at_reduce(p_.numRanks(), 0);
    std::vector<int> pos(p_.numRanks(), 0);

    bool progress = true;
    while (progress) {
      progress = false;
      for (int r = 0; r < p_.numRanks(); ++r) {
        while (pos[r] < static_cast<int>(p_.ranks[r].size())) {
          const int i = pos[r];
          const Action& a = p_.ranks[r][i];
          if (a.type == ActionType::RECV_F || a.type == ActionType::RECV_B) {
            const std::size_t key = messages_.of(a);
            if (!sent[key]) break;
            received[key] = 1;
          } else if (isSend(a.type)) {
            const bool backward = a.type == ActionType::SEND_B;
            const std::size_t k = idx(a.stage, a.microbatch);
            if (!(backward ? input_grad[k] : forward[k])) fail(r, i, "sends a result this rank has not computed yet");
            sent[messages_.of(a)] = 1;
          } else if (a.type == ActionType::ALLREDUCE) {
            const int k = reduces_done[r][a.stage];
            const int replicas = static_cast<int>(p_.stage_ranks[a.stage].size());
            if (!waiting_at_reduce[r]) {
              waiting_at_reduce[r] = 1;
              ++arrived[{a.stage, k}];
            }
            if (arrived[{a.stage, k}] < replicas) break;
            waiting_at_reduce[r] = 0;
            ++reduces_done[r][a.stage];
          } else if (a.type == ActionType::STEP) {
            int& v = latest[r][a.stage];
            if (a.version != v + 1)
              fail(r, i, "creates version " + std::to_string(a.version) + " but the stage is at version " + std::to_string(v));
            v = a.version;
          } else {
            runCompute(r, i, a, latest[r][a.stage], idx, forward, input_grad, weight_grad, f_version, i_version, received);
          }
          ++pos[r];
          progress = true;
        }
      }
    }
    std::string blocked;
    for (int r = 0; r < p_.numRanks(); ++r)
      if (pos[r] < static_cast<int>(p_.ranks[r].size()))
        blocked += "\n  rank " + std::to_string(r) + " waits at action " + std::to_string(pos[r]) + " (" +
                   describe(p_.ranks[r][pos[r]]) + ")";
    if (!blocked.empty()) throw Error("schedule \"" + p_.schedule + "\" deadlocks:" + blocked);
  }

  template <typename Index>
  void runCompute(int r, int i, const Action& a, int latest, Index idx, std::vector<char>& forward,
                  std::vector<char>& input_grad, std::vector<char>& weight_grad, std::vector<int>& f_version,
                  std::vector<int>& i_version, const std::vector<char>& received) {
    const int s = a.stage, j = a.microbatch;
    const std::size_t k = idx(s, j);
    if (a.version > latest)
      fail(r, i, "reads weight version " + std::to_string(a.version) + " but the stage is at version " + std::to_string(latest));
    auto needFrom = [&](int other, bool backward) {
      if (p_.rankOf(other, j) == r) {
        const std::size_t ko = idx(other, j);
        if (!(backward ? input_grad[ko] : forward[ko]))
          fail(r, i, std::string("needs the ") + (backward ? "gradient" : "activation") + " of stage " +
                         std::to_string(other) + " for micro-batch " + std::to_string(j) +
                         ", which this rank computes only later");
      } else {
        if (!received[backward ? messages_.of(true, s, other, j) : messages_.of(false, other, s, j)])
          fail(r, i, std::string("needs the ") + (backward ? "gradient" : "activation") + " of stage " +
                         std::to_string(other) + " from rank " + std::to_string(p_.rankOf(other, j)) +
                         ", but no " + (backward ? "RECV_B" : "RECV_F") + " precedes it");
      }
    };
    const bool stashed = p_.backward_weights == BackwardWeights::kStashed;
    switch (a.type) {
      case ActionType::F:
        for (int q : p_.stage_preds[s]) needFrom(q, false);
        forward[k] = 1;
        f_version[k] = a.version;
        break;
      case ActionType::B:
      case ActionType::I:
        if (!forward[k]) fail(r, i, "comes before the forward pass of the same micro-batch");
        for (int t : p_.stage_succs[s]) needFrom(t, true);
        if (stashed && a.version != f_version[k])
          fail(r, i, "reads weight version " + std::to_string(a.version) + " but its forward pass read version " +
                         std::to_string(f_version[k]) + " (a stashing schedule must use the same weights)");
        input_grad[k] = 1;
        if (a.type == ActionType::B) weight_grad[k] = 1;
        i_version[k] = a.version;
        break;
      default:  // W
        if (!input_grad[k]) fail(r, i, "a weight-gradient pass (W) must follow its input-gradient pass (I)");
        if (stashed && a.version != i_version[k])
          fail(r, i, "reads weight version " + std::to_string(a.version) + " but its I pass read version " +
                         std::to_string(i_version[k]));
        weight_grad[k] = 1;
        break;
    }
  }

  const Program& p_;
  const ActionLocator& where_;
  const MessageIndex messages_;
};

}  // namespace

void validate(const Program& program, const ActionLocator& where) { Checker(program, where).run(); }

void validateInOrderDelivery(const Program& program) {
  struct Posted {
    MessageKey message;
    int position;
  };
  // Per (sender, receiver): the sends in the sender's order, the receives in the receiver's.
  std::map<std::pair<int, int>, std::vector<Posted>> sends, receives;
  for (int r = 0; r < program.numRanks(); ++r)
    for (int i = 0; i < static_cast<int>(program.ranks[r].size()); ++i) {
      const Action& a = program.ranks[r][i];
      if (a.type != ActionType::SEND_F && a.type != ActionType::SEND_B && a.type != ActionType::RECV_F &&
          a.type != ActionType::RECV_B)
        continue;
      const int peer = program.rankOf(a.peer_stage, a.microbatch);
      if (isSend(a.type)) sends[{r, peer}].push_back({messageOf(a), i});
      else receives[{peer, r}].push_back({messageOf(a), i});
    }
  for (const auto& [ends, sent] : sends) {
    const std::vector<Posted>& got = receives[ends];
    const auto [from, to] = ends;
    for (std::size_t k = 0; k < sent.size() && k < got.size(); ++k) {
      if (sent[k].message == got[k].message) continue;
      throw Error("schedule \"" + program.schedule + "\": rank " + std::to_string(from) + " sends rank " +
                  std::to_string(to) + " its message " + std::to_string(k + 1) + " (" +
                  toString(program.ranks[from][sent[k].position]) + ", action " + std::to_string(sent[k].position) +
                  ") while rank " + std::to_string(to) + " expects " +
                  toString(program.ranks[to][got[k].position]) + " (action " + std::to_string(got[k].position) +
                  "): a channel without tags (NCCL) would deliver one as the other");
    }
  }
}

}  // namespace pipetrain::schedule
