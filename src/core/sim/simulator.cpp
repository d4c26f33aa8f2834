#include "pipetrain/sim/simulator.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "pipetrain/util/error.h"

namespace pipetrain::sim {
namespace {

using schedule::Action;
using schedule::ActionType;

constexpr double kUnknown = -1;

class Simulation {
 public:
  // Records the timeline where `record` is true, else only its totals.
  Simulation(const schedule::Program& p, const CostModel& c, bool record)
      : p_(p), c_(c), record_(record), total_(p.totalMicrobatches()), pos_(p.numRanks(), 0), clock_(p.numRanks(), 0),
        last_compute_(p.numRanks(), 0), compute_since_meeting_(p.numRanks(), 0),
        forward_done_(index(p.num_stages, 0), kUnknown), input_grad_done_(forward_done_.size(), kUnknown),
        port_free_(c.cluster().numPorts(), 0), messages_(p), arrival_(messages_.size(), kUnknown),
        waiter_(messages_.size(), -1) {
    if (c.pricesVersions()) versions_ = schedule::versionWork(p, c.correctsDiscrepancy());
    if (record_) {
      // Sized up front: growing them by doubling took 7% of a simulation's time.
      timeline_.ranks.resize(p.numRanks());
      std::size_t sends = 0;
      for (int r = 0; r < p.numRanks(); ++r) {
        std::size_t computes = 0;
        for (const Action& a : p.ranks[r]) {
          sends += schedule::isSend(a.type);
          computes += !schedule::isComm(a.type);
        }
        timeline_.ranks[r].reserve(computes);
      }
      timeline_.transfers.reserve(sends);
    } else {
      totals_.busy.assign(p.numRanks(), 0.0);
      totals_.port_wire.assign(c.cluster().numPorts(), 0.0);
    }
    shareCores();
  }

  void run() {
    for (int r = 0; r < p_.numRanks(); ++r) schedule(r);
    while (true) {
      // A compute action that ends frees its share of the cores before anything starts
      // at the same instant.
      const auto [core, finish] = nextFinish();
      if (core >= 0 && (ready_.empty() || finish <= ready_.top().first)) {
        finishShared(core, finish);
        continue;
      }
      if (ready_.empty()) break;
      auto [start, r] = ready_.top();
      ready_.pop();
      // The rank goes on for as long as its next action would come off the queue next
      // anyway: the same order of events, without a push and a pop per action (the
      // queue was a third of a simulation's time).
      while (execute(r, start)) {
        if (pos_[r] >= static_cast<int>(p_.ranks[r].size())) break;
        const double t = readyTime(r);
        if (t == kUnknown) break;
        if (!runsNext(t, r)) {
          ready_.emplace(t, r);
          break;
        }
        start = t;
      }
    }
    // A Program the validator passed never stalls; one it was not shown (the planner's
    // extrapolation checks a plan at one count of micro-batches) is refused here rather
    // than timed short.
    for (int r = 0; r < p_.numRanks(); ++r)
      if (pos_[r] < static_cast<int>(p_.ranks[r].size()))
        throw Error("the " + p_.schedule + " Program stalls: rank " + std::to_string(r) + " waits forever at " +
                    schedule::toString(p_.ranks[r][pos_[r]]));
  }

  trace::Timeline timeline() && { return std::move(timeline_); }
  Totals totals() && { return std::move(totals_); }

 private:
  struct Job {
    int rank;
    double start;
    double remaining;  // seconds of work left at the device's full speed
  };
  struct Core {             // a shared core and the ranks placed on it
    double now = 0;         // the jobs' remaining work is as of this time
    std::vector<Job> jobs;  // computing now, each at rateOf() of its speed
  };

  std::size_t index(int stage, int mb) const { return static_cast<std::size_t>(stage) * total_ + mb; }

  // Earliest time the next action of rank r may start, or kUnknown if it waits for
  // something not yet simulated (then the rank is parked until that event happens).
  double readyTime(int r) {
    const Action& a = p_.ranks[r][pos_[r]];
    // What the runtime does between two actions (posting receives, retiring versions,
    // timing) delays the next, partly in proportion to the compute just ended; where the
    // rank waits anyway, that wait hides it.
    double t = clock_[r] + c_.actionOverhead(r) + c_.actionOverheadShare(r) * last_compute_[r];
    switch (a.type) {
      case ActionType::RECV_F:
      case ActionType::RECV_B: {
        const std::size_t message = messages_.of(a);
        if (arrival_[message] == kUnknown) {
          waiter_[message] = r;  // only its receiver waits for a message
          return kUnknown;
        }
        return std::max(t, arrival_[message]);
      }
      case ActionType::F:
        // Inputs from stages on this rank were computed earlier in its list; inputs
        // from other ranks came through a RECV, which already advanced the clock.
        for (int q : p_.stage_preds[a.stage])
          if (p_.rankOf(q, a.microbatch) == r) t = std::max(t, forward_done_[index(q, a.microbatch)]);
        return t;
      case ActionType::B:
      case ActionType::I:
        t = std::max(t, forward_done_[index(a.stage, a.microbatch)]);
        for (int s : p_.stage_succs[a.stage])
          if (p_.rankOf(s, a.microbatch) == r) t = std::max(t, input_grad_done_[index(s, a.microbatch)]);
        return t;
      case ActionType::ALLREDUCE: {
        auto& meeting = meetings_[{a.stage, reduces_seen_[{r, a.stage}]}];
        if (meeting.arrived_ranks.insert(r).second) {
          meeting.latest = std::max(meeting.latest, t);
          meeting.gradients_started = std::max(meeting.gradients_started, gradients_started_[{r, a.stage}]);
        }
        const int replicas = static_cast<int>(p_.stage_ranks[a.stage].size());
        if (static_cast<int>(meeting.arrived_ranks.size()) < replicas) {
          meeting.parked.push_back(r);
          return kUnknown;
        }
        const double latest = meeting.latest;
        std::vector<int> parked = std::move(meeting.parked);
        meeting.parked.clear();
        for (int other : parked) schedule(other);
        return latest;
      }
      default:
        return t;
    }
  }

  // Whether rank r, ready at t, is what the loop in run() would take next.
  bool runsNext(double t, int r) const {
    if (!ready_.empty() && !(std::make_pair(t, r) < ready_.top())) return false;
    if (cores_.empty()) return true;
    const auto [core, finish] = nextFinish();
    return core < 0 || finish > t;
  }

  void schedule(int r) {
    if (pos_[r] >= static_cast<int>(p_.ranks[r].size())) return;
    const double t = readyTime(r);
    if (t != kUnknown) ready_.emplace(t, r);
  }

  void wake(std::size_t message) {
    const int r = std::exchange(waiter_[message], -1);
    if (r >= 0) schedule(r);
  }

  // Runs rank r's next action from `start`; false while it still computes on shared
  // cores (finishShared() then completes it). A message's host cost occupies the rank
  // like compute (the sender's before the bytes leave) but is not in the timeline: the
  // runtime's measured timeline has it in the gaps between actions too.
  bool execute(int r, double start) {
    const auto& actions = p_.ranks[r];
    const std::size_t at = pos_[r];
    const Action& a = actions[at];
    ++pos_[r];
    last_compute_[r] = 0;  // a compute action sets it where it ends (computed)
    const bool overlapped = a.overlap_next || schedule::overlapsPrevious(actions, at);
    double end = start;
    switch (a.type) {
      case ActionType::F:
      case ActionType::B:
      case ActionType::I:
      case ActionType::W:
      case ActionType::STEP: {
        const double seconds = c_.computeSeconds(a, r) * (overlapped ? c_.overlapFactor() : 1.0) +
                               (versions_.empty() ? 0.0 : c_.versionSeconds(a, versions_[r][at], r));
        // The replicas' reduction can begin once this pass has filled its first bucket.
        if (a.type == ActionType::B || a.type == ActionType::W)
          gradients_started_[{r, a.stage}] = start + seconds * firstBucketShare(c_.stage(a.stage).param_bytes);
        if (core_of_rank_[r] >= 0) {
          startShared(core_of_rank_[r], r, start, seconds);
          return false;
        }
        end = start + seconds;
        computed(r, a, start, end);
        break;
      }
      case ActionType::ALLREDUCE: {
        // Bucketed all-reduce: gradients stream out while the last backward pass still
        // runs, so the reduction starts when every replica has begun that pass and only
        // what outlasts it delays the rank. What it takes of the rank's core (hosts that
        // move and sum the traffic themselves) the pass cannot overlap: it comes after.
        // Replicas whose compute wanders wait for the last of them: the expected wait
        // grows with the compute since their previous meeting (CostModel::meetingWaitShare).
        int& seen = reduces_seen_[{r, a.stage}];
        const Meeting& meeting = meetings_.at({a.stage, seen});
        end = std::max(start + c_.allreduceHostSeconds(a.stage),
                       meeting.gradients_started + c_.allreduceSeconds(a.stage)) +
              c_.meetingWaitShare(a.stage) * compute_since_meeting_[r];
        compute_since_meeting_[r] = 0;
        ++seen;
        timed(r, a, start, end);
        break;
      }
      default: {  // SEND and RECV (the data is here): the host's share of the message first
        const double host = c_.hostSeconds(a, r, p_.rankOf(a.peer_stage, a.microbatch));
        if (host > 0 && core_of_rank_[r] >= 0) {
          startShared(core_of_rank_[r], r, start, host);
          return false;
        }
        end = start + host;
        if (a.type == ActionType::SEND_F || a.type == ActionType::SEND_B) send(r, a, end);
        break;
      }
    }
    clock_[r] = end;
    return true;
  }

  // The timeline's entry, or what Timeline::makespan and busySeconds would make of it.
  void timed(int r, const Action& a, double start, double end) {
    if (record_) {
      timeline_.ranks[r].push_back({a, start, end});
      return;
    }
    totals_.makespan = std::max(totals_.makespan, end);
    if (schedule::isCompute(a.type) || a.type == ActionType::STEP) totals_.busy[r] += end - start;
  }

  void computed(int r, const Action& a, double start, double end) {
    timed(r, a, start, end);
    last_compute_[r] = end - start;
    compute_since_meeting_[r] += end - start;
    if (a.type == ActionType::F) forward_done_[index(a.stage, a.microbatch)] = end;
    if (a.type == ActionType::B || a.type == ActionType::I) input_grad_done_[index(a.stage, a.microbatch)] = end;
    clock_[r] = end;
  }

  // Ranks on devices that share cores (ClusterSpec's shared_cores) go onto the group's
  // cores round-robin in rank order (cluster::sharedCoreOf), and a core with several
  // ranks runs those that compute in turn, fairly (processor sharing). A rank alone on
  // its core keeps the
  // plain path, so plans without oversubscription cost what they did without shared
  // cores, and only cores with several ranks are watched for finishing jobs.
  void shareCores() {
    core_of_rank_.assign(p_.numRanks(), -1);
    const cluster::ClusterSpec& cluster = c_.cluster();
    std::vector<std::vector<int>> ranks_of(cluster.sharedCores().size());
    for (int r = 0; r < p_.numRanks(); ++r) {
      const int g = cluster.sharedCoresOf(c_.deviceOfRank(r));
      if (g >= 0) ranks_of[g].push_back(r);
    }
    for (std::size_t g = 0; g < ranks_of.size(); ++g) {
      const int cores = cluster.sharedCores()[g].cores, ranks = static_cast<int>(ranks_of[g].size());
      std::vector<int> on_core(cores, 0), index_of_core(cores, -1);
      for (int i = 0; i < ranks; ++i) ++on_core[cluster::sharedCoreOf(i, cores)];
      for (int i = 0; i < ranks; ++i) {
        const int core = cluster::sharedCoreOf(i, cores);
        if (on_core[core] < 2) continue;
        if (index_of_core[core] < 0) {
          index_of_core[core] = static_cast<int>(cores_.size());
          cores_.push_back({});
        }
        core_of_rank_[ranks_of[g][i]] = index_of_core[core];
      }
    }
  }

  // Each of the core's computing ranks gets an equal share of it.
  static double rateOf(const Core& c) { return c.jobs.empty() ? 1.0 : 1.0 / static_cast<double>(c.jobs.size()); }

  // Moves every job of core c on to time t at the core's current rate.
  void advance(Core& c, double t) {
    assert(t >= c.now);
    const double done = (t - c.now) * rateOf(c);
    for (Job& j : c.jobs) j.remaining -= done;
    c.now = t;
  }

  void startShared(int core, int r, double start, double seconds) {
    Core& c = cores_[core];
    advance(c, start);
    c.jobs.push_back({r, start, seconds});
  }

  // The core whose next job ends first, and when; (-1, 0) when nothing computes.
  std::pair<int, double> nextFinish() const {
    std::pair<int, double> next{-1, 0};
    for (std::size_t i = 0; i < cores_.size(); ++i) {
      const Core& c = cores_[i];
      if (c.jobs.empty()) continue;
      double least = c.jobs.front().remaining;
      for (const Job& j : c.jobs) least = std::min(least, j.remaining);
      const double t = c.now + std::max(0.0, least) / rateOf(c);
      if (next.first < 0 || t < next.second) next = {static_cast<int>(i), t};
    }
    return next;
  }

  // Completes the job of `core` that nextFinish() found due at t, with any that end
  // with it, and lets their ranks go on.
  void finishShared(int core, double t) {
    Core& c = cores_[core];
    advance(c, t);
    // The due job's remaining work is zero up to rounding, so it is found as the least.
    double least = c.jobs.front().remaining;
    for (const Job& j : c.jobs) least = std::min(least, j.remaining);
    constexpr double kTie = 1e-12;  // seconds of work
    std::vector<Job> done;
    for (auto it = c.jobs.begin(); it != c.jobs.end();)
      if (it->remaining <= least + kTie) {
        done.push_back(*it);
        it = c.jobs.erase(it);
      } else {
        ++it;
      }
    for (const Job& j : done) {
      const Action& a = p_.ranks[j.rank][pos_[j.rank] - 1];
      if (!schedule::isComm(a.type)) {
        computed(j.rank, a, j.start, t);
      } else {  // a message's host time
        clock_[j.rank] = t;
        if (a.type == ActionType::SEND_F || a.type == ActionType::SEND_B) send(j.rank, a, t);
      }
      schedule(j.rank);
    }
  }

  void send(int r, const Action& a, double issue) {
    const int to_rank = p_.rankOf(a.peer_stage, a.microbatch);
    const cluster::Route route = c_.route(r, to_rank);
    const double bytes = c_.messageBytes(a);
    double start = issue;
    if (route.send_port >= 0) start = std::max(start, port_free_[route.send_port]);
    if (route.recv_port >= 0) start = std::max(start, port_free_[route.recv_port]);
    const double wire = bytes / route.bandwidth;  // 0 for an infinite bandwidth
    if (route.send_port >= 0) port_free_[route.send_port] = start + wire;
    if (route.recv_port >= 0) port_free_[route.recv_port] = start + wire;
    const double arrival = start + wire + route.latency;
    if (record_) {
      timeline_.transfers.push_back({a, r, to_rank, start, arrival, bytes});
    } else {
      totals_.makespan = std::max(totals_.makespan, arrival);
      if (route.send_port >= 0) totals_.port_wire[route.send_port] += wire;
      if (route.recv_port >= 0) totals_.port_wire[route.recv_port] += wire;
    }
    const std::size_t message = messages_.of(a);
    arrival_[message] = arrival;
    wake(message);
  }

  struct Meeting {
    std::unordered_set<int> arrived_ranks;
    std::vector<int> parked;
    double latest = 0;             // when the last replica arrived
    double gradients_started = 0;  // when the last replica began its final backward pass
  };
  struct PairHash {
    std::size_t operator()(const std::pair<int, int>& k) const {
      return std::hash<int64_t>()((static_cast<int64_t>(k.first) << 32) ^ k.second);
    }
  };

  const schedule::Program& p_;
  const CostModel& c_;
  const bool record_;
  int total_;
  std::vector<int> pos_;
  std::vector<double> clock_;
  std::vector<double> last_compute_;  // per rank: how long its last compute action took
  std::vector<double> compute_since_meeting_;  // per rank: its compute since its last all-reduce
  std::vector<double> forward_done_, input_grad_done_;
  std::vector<double> port_free_;
  const schedule::MessageIndex messages_;
  std::vector<std::vector<schedule::VersionWork>> versions_;  // per rank and position; empty: unpriced
  std::vector<double> arrival_;  // by message: when it arrives, or kUnknown
  std::vector<int> waiter_;      // by message: the rank parked until it arrives, or -1
  std::unordered_map<std::pair<int, int>, Meeting, PairHash> meetings_;
  std::unordered_map<std::pair<int, int>, int, PairHash> reduces_seen_;
  std::unordered_map<std::pair<int, int>, double, PairHash> gradients_started_;  // (rank, stage)
  std::vector<int> core_of_rank_;  // index into cores_, or -1 for a core of its own
  std::vector<Core> cores_;
  // (start time, rank), earliest first; ties go to the lower rank for determinism.
  std::priority_queue<std::pair<double, int>, std::vector<std::pair<double, int>>, std::greater<>> ready_;
  trace::Timeline timeline_;  // where record_
  Totals totals_;             // where not
};

}  // namespace

trace::Timeline simulate(const schedule::Program& program, const CostModel& costs) {
  Simulation simulation(program, costs, true);
  simulation.run();
  trace::Timeline timeline = std::move(simulation).timeline();
  timeline.source = "simulated";
  return timeline;
}

Totals simulateTotals(const schedule::Program& program, const CostModel& costs) {
  Simulation simulation(program, costs, false);
  simulation.run();
  return std::move(simulation).totals();
}

}  // namespace pipetrain::sim
