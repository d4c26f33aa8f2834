#include "pipetrain/job/network_job.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "pipetrain/job/launcher.h"
#include "pipetrain/torch/device.h"
#include "pipetrain/torch/transport.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::job {
namespace {

void checkOptions(const NetworkJob& job) {
  if (job.options.sizes.empty()) throw Error("--sizes: give at least one message size");
  if (job.options.repeats < 1) throw Error("--repeats must be at least 1");
}

}  // namespace

std::optional<NetworkMeasured> measureNetworkRank(const NetworkJob& job) {
  checkOptions(job);
  runtime::Rendezvous rv = runtime::Rendezvous::fromEnvironment();
  rv.timeout = std::chrono::seconds(job.timeout_seconds);
  const int local_rank = runtime::localRank(rv.rank);
  auto transport = runtime::makeGlooTransport(rv);
  const torch::Device device = runtime::rankDevice(job.device, local_rank);
  // Its all-reduces sum CPU tensors: on GPUs they go over Gloo, through host memory.
  const std::string wire = job.wire == "auto" && !device.is_cpu() ? "gloo" : job.wire;
  const std::unique_ptr<runtime::DataChannel> sums = runtime::openDataChannel(wire, rv, device, *transport);
  const int64_t largest = *std::max_element(job.options.sizes.begin(), job.options.sizes.end());
  profiler::NetworkProfile p = profiler::profileNetwork(
      *transport, profiler::thisHost(local_rank, rv, device, largest), job.options, sums.get());
  if (rv.rank != 0) return std::nullopt;
  cluster::ClusterSpec c = profiler::clusterFromNetwork(p);
  return NetworkMeasured{std::move(p), std::move(c), sums ? sums->name() : transport->name()};
}

std::string deliverNetworkResult(const NetworkJob& job, const NetworkMeasured& measured) {
  if (std::getenv("PIPETRAIN_LAUNCHED")) {
    std::printf("RESULT %s\n", measured.cluster.toJson().dump().c_str());
    std::fflush(stdout);
    return "";
  }
  json_io::writeFile(job.out, measured.cluster.toJson());
  return job.out;
}

cluster::ClusterSpec launchNetworkJob(const NetworkJob& job, const std::function<void(const std::string&)>& line) {
  if (job.nproc < 2) throw Error("--nproc must be at least 2: latency and bandwidth are measured between ranks");
  checkOptions(job);  // before any rank starts
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = std::max(1, static_cast<int>(cores) / job.nproc);
  const auto outputs = launchLocal(job.argv, job.nproc, threads, [&](int rank, const std::string& text) {
    if (rank == 0 && line) line(text);
  });
  if (outputs.empty() || outputs[0].result_json.empty()) throw Error("rank 0 ended without reporting its measurements");
  cluster::ClusterSpec c =
      cluster::ClusterSpec::fromJson(json_io::Json::parse(outputs[0].result_json), "rank 0's cluster");
  json_io::writeFile(job.out, c.toJson());
  return c;
}

}  // namespace pipetrain::job
