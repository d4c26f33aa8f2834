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
      throw Error(what + ": " + e.what());
    }
  }
};

bool TorchrunJob::here() { return runtime::Rendezvous::fromEnvironment().agent_store; }

TorchrunJob::TorchrunJob(const runtime::Rendezvous& rendezvous) : rendezvous_(rendezvous), store_(new Store) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(rendezvous.master_port);
  options.isServer = false;  // torchrun's agent serves it
  options.waitWorkers = false;
  options.timeout = rendezvous.timeout;
  try {
    c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>(rendezvous.master_addr, options);
    store_->store = c10::make_intrusive<c10d::PrefixStore>(rendezvous.store_prefix + "/pipetrain-job", store);
  } catch (const std::exception& e) {
    throw Error("rank " + std::to_string(rendezvous.rank) + ": cannot reach torchrun's store at " +
                rendezvous.master_addr + ":" + std::to_string(rendezvous.master_port) + ": " + e.what());
  }
}

TorchrunJob::~TorchrunJob() = default;

int TorchrunJob::rank() const { return rendezvous_.rank; }
int TorchrunJob::worldSize() const { return rendezvous_.world_size; }

bool TorchrunJob::oneHost() const {
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  return local && std::atoi(local) == rendezvous_.world_size;
}

void TorchrunJob::sharePlan(const plan::Plan& plan, const Json& planner) {
  store_->set("plan", Json{{"plan", plan.toJson()}, {"planner", planner}}.dump());
}

void TorchrunJob::sharePlanFailure(const std::string& why) { store_->set("plan", Json{{"error", why}}.dump()); }

void TorchrunJob::receivePlan(TrainRequest& request, std::chrono::seconds patience) {
  const Json shared = Json::parse(store_->get("plan", patience, "rank " + std::to_string(rank()) +
                                                                    ": waiting for rank 0's plan"));
  if (shared.contains("error")) throw Error("rank 0 found no plan: " + shared["error"].get<std::string>());
  request.config.plan = plan::Plan::fromJson(shared["plan"], "rank 0's plan");
  request.planner = shared["planner"];
}

LaunchedRun TorchrunJob::gatherResults(const runtime::RankResult& mine, std::chrono::steady_clock::time_point start) {
  store_->set("result/" + std::to_string(rank()), rankResultToJson(mine).dump());
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
