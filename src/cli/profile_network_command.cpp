// `pipetrain profile-network`: latency and bandwidth between ranks over the real Gloo
// transport, written as a ClusterSpec (docs/profiling.md#network-pipetrain-profile-network). Like `train`: without
// RANK in the environment it launches --nproc local ranks of itself; with RANK set it is
// one rank (torchrun conventions, LOCAL_RANK naming its device on the host).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "commands.h"
#include "options.h"
#include "pipetrain/job/network_job.h"
#include "pipetrain/util/text.h"

namespace pipetrain::cli {
namespace {

struct NetworkArgs {
  job::NetworkJob job;
  std::vector<std::string> sizes = {"1M", "4M", "16M"};  // as typed: binary K/M/G, parsed into job.options
};

std::string rate(double bytes_per_second) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GB/s", bytes_per_second / 1e9);
  return buf;
}

std::string micros(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f us", seconds * 1e6);
  return buf;
}

void printProfile(const profiler::NetworkProfile& p, const cluster::ClusterSpec& c) {
  auto device = [&](int r) { return p.ranks[r].host + "-" + std::to_string(p.ranks[r].local_rank); };
  for (const auto& m : p.pairs) {
    std::printf("rank %d (%s) <-> rank %d (%s): latency %s; bandwidth", m.from, device(m.from).c_str(), m.peer,
                device(m.peer).c_str(), micros(m.latency_seconds).c_str());
    for (std::size_t i = 0; i < p.sizes.size(); ++i)
      std::printf("%s %s %s", i ? "," : "", text::humanBytes(p.sizes[i]).c_str(), rate(m.bandwidth[i]).c_str());
    std::printf("; host CPU per message %s, more for", micros(m.overhead_seconds).c_str());
    for (std::size_t i = 0; i < p.sizes.size(); ++i)
      std::printf("%s %s %s", i ? "," : "", text::humanBytes(p.sizes[i]).c_str(),
                  micros(m.message_cpu_seconds[i]).c_str());
    std::printf("\n");
  }
  if (p.allreduce_seconds > 0)
    std::printf("all-reduce of %s over %zu ranks: %.2f ms, %.2f ms of rank 0's CPU\n",
                text::humanBytes(p.allreduce_bytes).c_str(), p.ranks.size(), p.allreduce_seconds * 1e3,
                p.allreduce_cpu_seconds * 1e3);
  if (p.small_allreduce_seconds > 0)
    std::printf("all-reduce of %s: %.3f ms on average (its fixed cost)\n", text::humanBytes(64 << 10).c_str(),
                p.small_allreduce_seconds * 1e3);
  for (std::size_t r = 0; r < p.ranks.size(); ++r)
    if (p.ranks[r].host_link_bandwidth > 0)
      std::printf("rank %zu's GPU <-> its host's pinned memory: %s (the slower way)\n", r,
                  rate(p.ranks[r].host_link_bandwidth).c_str());
  std::printf("cluster: %d devices of %s each;", c.size(), text::humanBytes(c.device(0).memory_bytes).c_str());
  for (const auto& l : c.levels()) {
    std::printf(" level '%s' (groups of %d) %s, %s, host CPU %s + bytes at %s per side", l.name.c_str(),
                l.group_size, rate(l.bandwidth).c_str(), micros(l.latency).c_str(), micros(l.host.overhead).c_str(),
                rate(l.host.copy_bandwidth).c_str());
    if (l.allreduce_bandwidth > 0) std::printf(", all-reduce traffic at %s", rate(l.allreduce_bandwidth).c_str());
    if (!std::isinf(l.allreduce_host_bandwidth))
      std::printf(" (%s through each rank's CPU)", rate(l.allreduce_host_bandwidth).c_str());
    if (l.allreduce_latency >= 0) std::printf(", %s per step of its ring", micros(l.allreduce_latency).c_str());
    std::printf(";");
  }
  for (const auto& l : c.links())
    std::printf(" link %s <-> %s %s, %s;", l.a.c_str(), l.b.c_str(), rate(l.bandwidth).c_str(),
                micros(l.latency).c_str());
  std::printf("\n");
  std::fflush(stdout);
}

void parseSizes(NetworkArgs& a) {
  a.job.options.sizes.clear();
  for (const auto& s : a.sizes) a.job.options.sizes.push_back(parseByteSize(s, "--sizes"));
}

// One rank. Rank 0 prints what it measured and hands the cluster on (to the launcher
// that started it, or to --out).
int runRank(NetworkArgs& a) {
  parseSizes(a);
  const std::optional<job::NetworkMeasured> m = job::measureNetworkRank(a.job);
  if (!m) return 0;
  std::printf("all-reduces on %s\n", m->sums_on.c_str());
  printProfile(m->profile, m->cluster);
  if (const std::string written = job::deliverNetworkResult(a.job, *m); !written.empty())
    std::printf("wrote %s\n", written.c_str());
  std::fflush(stdout);
  return 0;
}

int launch(NetworkArgs& a) {
  parseSizes(a);
  text::checkWritable(a.job.out, "--out");
  job::launchNetworkJob(a.job, [](const std::string& line) { std::printf("%s\n", line.c_str()); });
  std::printf("wrote %s\n", a.job.out.c_str());
  return 0;
}

}  // namespace

Command addProfileNetworkCommand(CLI::App& app, const std::vector<std::string>& argv) {
  auto a = std::make_shared<NetworkArgs>();
  a->job.argv = argv;
  CLI::App* cmd = app.add_subcommand("profile-network", torchCommandDescription("profile-network"));
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->add_option("--nproc", a->job.nproc, "local ranks to launch (ignored when RANK is set)")->capture_default_str();
  cmd->add_option("--sizes", a->sizes, "bandwidth message sizes, e.g. 1M,4M,16M (binary K/M/G)")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->capture_default_str();
  cmd->add_option("--repeats", a->job.options.repeats, "timed round trips per measurement (the median is kept)")
      ->capture_default_str();
  cmd->add_option("--timeout", a->job.timeout_seconds, "seconds before a silent peer ends the job")->capture_default_str();
  cmd->add_option("--device", a->job.device,
                  "where the ranks compute, as train's --device: on GPUs each rank also times its copies to and from "
                  "the host, and the cluster prices messages through host memory (Gloo) with them")
      ->capture_default_str();
  cmd->add_option("--wire", a->job.wire, "what the all-reduces run on: shm (shared memory between CPU ranks of one host), gloo, or auto "
                  "(shm where it can, else gloo), as train's --wire chooses for CPU ranks; messages always go over "
                  "gloo")
      ->check(CLI::IsMember({"auto", "gloo", "shm"}))
      ->capture_default_str();
  cmd->add_option("--out", a->job.out, "the cluster JSON to write")->required();
  return {cmd, [a] { return std::getenv("RANK") ? runRank(*a) : launch(*a); }};
}

}  // namespace pipetrain::cli
