#include "pipetrain/job/torchrun_job.h"

#include <cstdlib>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "pipetrain/job/rank_report.h"
#include "pipetrain/util/clock.h"
#include "pipetrain/util/error.h"

namespace pipetrain::job {
namespace {

using json_io::Json;

std::vector<uint8_t> bytesOf(const std::string& text) { return {text.begin(), text.end()}; }
std::string textOf(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

// How long rank 0 waits for the others' results once it has its own: they finish
// training within a step of it; evaluation and export may take longer.
constexpr std::chrono::minutes kResultPatience{10};

}  // namespace

struct TorchrunJob::Store {
  c10::intrusive_ptr<c10d::Store> store;

  void set(const std::string& key, const std::string& value) { store->set(key, bytesOf(value)); }

  std::string get(const std::string& key, std::chrono::milliseconds patience, const std::string& what) {
    try {
      store->wait({key}, patience);
      return textOf(store->get(key));
    } catch (const std::exception& e) {
      throw Error(what + ": " + runtime::errorMessage(e));
    }
  }
};

bool TorchrunJob::here() { return runtime::Rendezvous::fromEnvironment().agent_store; }

bool TorchrunJob::startedByHand() {
  const char* world = std::getenv("WORLD_SIZE");
  return std::getenv("RANK") && world && std::atoi(world) > 1 && !here();
}

TorchrunJob::TorchrunJob(const runtime::Rendezvous& rendezvous) : rendezvous_(rendezvous), store_(new Store) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(rendezvous.master_port);
  options.isServer = rendezvous.rank == 0 && !rendezvous.agent_store;  // else torchrun's agent serves it
  options.numWorkers = rendezvous.world_size;
  options.waitWorkers = false;
  options.timeout = rendezvous.timeout;
  const std::string whose = rendezvous.agent_store ? "torchrun's store" : "rank 0's store";
  try {
    store_->store = c10::make_intrusive<c10d::TCPStore>(rendezvous.master_addr, options);
  } catch (const std::exception& e) {
    throw Error("rank " + std::to_string(rendezvous.rank) + ": cannot reach " + whose + " at " +
                rendezvous.master_addr + ":" + std::to_string(rendezvous.master_port) + ": " +
                runtime::errorMessage(e));
  }
  if (!rendezvous.agent_store) {
    // From here on this process meets the others in that store, as under torchrun's
    // agent: every later rendezvous (the network's group, the training transport) reads
    // the environment, and a second server on the port would fail.
    setenv("TORCHELASTIC_USE_AGENT_STORE", "1", 1);
    rendezvous_.agent_store = true;
  }
  store_->store = c10::make_intrusive<c10d::PrefixStore>(rendezvous.store_prefix + "/pipetrain-job", store_->store);
}

TorchrunJob::~TorchrunJob() = default;

int TorchrunJob::rank() const { return rendezvous_.rank; }
int TorchrunJob::worldSize() const { return rendezvous_.world_size; }

void TorchrunJob::sharePlace(const RankPlace& mine) {
  store_->set("place/" + std::to_string(rank()), mine.toJson().dump());
}

std::vector<RankPlace> TorchrunJob::places(std::chrono::seconds patience) {
  std::vector<RankPlace> all;
  for (int r = 0; r < worldSize(); ++r) {
    const std::string origin = "rank " + std::to_string(r) + "'s place";
    all.push_back(RankPlace::fromJson(Json::parse(store_->get("place/" + std::to_string(r), patience,
                                                              "waiting for " + origin)),
                                      origin));
  }
  return all;
}

void TorchrunJob::announceNetworkMeasurement(bool measure) {
  if (network_announced_) return;
  network_announced_ = true;
  store_->set("network", measure ? "measure" : "none");
}

bool TorchrunJob::networkMeasurementAnnounced(std::chrono::seconds patience) {
  return store_->get("network", patience, "rank " + std::to_string(rank()) + ": waiting for rank 0's plan") ==
         "measure";
}

cluster::ClusterSpec TorchrunJob::networkOfHosts(const std::vector<RankPlace>& places, const std::string& wire,
                                                 const std::string& device_spec, bool remeasure, const Say& say) {
  checkNumberedHostByHost(places);
  const graph::ProfileKey key = networkKey(places, wire);
  std::optional<CachedNetwork> network = remeasure ? std::nullopt : findNetwork(key);
  announceNetworkMeasurement(!network);
  if (network) {
    say("the network between the job's hosts, as measured before (" + network->path + "):");
  } else {
    say(formatted("measuring the network between the job's %d ranks on their hosts, as profile-network does",
                  worldSize()));
    network = CachedNetwork{*measureNetwork(rendezvous_, wire, device_spec), ""};
    network->path = storeNetwork(key, network->cluster);
    say(network->path.empty() ? "measured (not kept: the cache folder cannot be written):"
                              : "measured, and kept for the next job on these hosts (" + network->path + "):");
  }
  for (const std::string& line : describeNetwork(network->cluster)) say("  " + line);
  return network->cluster;
}

void TorchrunJob::sharePlan(const plan::Plan& plan, const std::optional<report::PlannerRecord>& planner,
                            const std::vector<int>& plan_ranks) {
  announceNetworkMeasurement(false);
  store_->set("plan", Json{{"plan", plan.toJson()},
                           {"planner", planner ? report::plannerRecordToJson(*planner) : Json()},
                           {"plan_ranks", plan_ranks}}
                          .dump());
}

void TorchrunJob::sharePlanFailure(const std::string& why) {
  announceNetworkMeasurement(false);
  store_->set("plan", Json{{"error", why}}.dump());
}

void TorchrunJob::receivePlan(TrainRequest& request, std::chrono::seconds patience) {
  const Json shared = Json::parse(store_->get("plan", patience, "rank " + std::to_string(rank()) +
                                                                    ": waiting for rank 0's plan"));
  if (shared.contains("error")) throw Error("rank 0 found no plan: " + shared["error"].get<std::string>());
  request.config.plan = plan::Plan::fromJson(shared["plan"], "rank 0's plan");
  if (!shared["planner"].is_null())
    request.planning.record =
        report::plannerRecordFromJson(json_io::JsonCursor(shared["planner"], "rank 0's planner record"));
  if (!shared["plan_ranks"].empty()) request.ranks.plan_rank = shared["plan_ranks"].at(rank()).get<int>();
}

LaunchedRun TorchrunJob::gatherResults(const runtime::RankResult& mine, int plan_rank,
                                       std::chrono::steady_clock::time_point start) {
  store_->set("result/" + std::to_string(plan_rank), rankResultToJson(mine).dump());
  LaunchedRun run;
  if (rank() != 0) return run;
  for (int r = 0; r < worldSize(); ++r) {
    const std::string origin = "rank " + std::to_string(r) + "'s result";
    run.ranks.push_back(rankResultFromJson(
        Json::parse(store_->get("result/" + std::to_string(r), kResultPatience, "waiting for " + origin)), origin));
  }
  run.wall_seconds = secondsSince(start);
  return run;
}

}  // namespace pipetrain::job
