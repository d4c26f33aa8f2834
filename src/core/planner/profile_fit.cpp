#include "pipetrain/planner/profile_fit.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "pipetrain/util/text.h"

namespace pipetrain::planner {
namespace {

std::string threadsText(int n) { return std::to_string(n) + (n == 1 ? " thread" : " threads"); }

std::string devicesText(int n) { return std::to_string(n) + (n == 1 ? " CPU device" : " CPU devices"); }

// "1 (2 devices), 4 (1 device)": the threads of the devices a note is about.
std::string threadCounts(const std::map<int, int>& devices_on) {
  std::string text;
  for (const auto& [threads, n] : devices_on)
    text += (text.empty() ? "" : ", ") + std::to_string(threads) + " (" + std::to_string(n) +
            (n == 1 ? " device)" : " devices)");
  return text;
}

void addSentence(std::string& note, const std::string& sentence) { note += (note.empty() ? "" : "; ") + sentence; }

}  // namespace

double threadTimeFactor(int profiled, double speedup, int threads) {
  if (profiled <= 1) return 1.0;  // one thread says nothing of how a step divides over more
  if (threads == 1) return speedup;  // measured, whatever the law would make of it
  const double s = std::clamp(speedup, 1.0, static_cast<double>(profiled));
  // time(n) / time(1) = serial + (1 - serial) / n, with time(profiled) / time(1) = 1 / s.
  const double serial = (profiled / s - 1) / (profiled - 1);
  return (serial + (1 - serial) / threads) * s;
}

ProfileFit fitProfileToCluster(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster) {
  const graph::ProfiledAs& how = graph.profiledAs();
  ProfileFit fit{cluster, ""};
  const int profiled = how.threads;
  if (profiled <= 0) return fit;  // not recorded: nothing to bring anywhere
  std::vector<cluster::Device> devices = cluster.devices();
  std::map<int, int> brought, fewer, more;  // threads -> devices
  int unsaid = 0;
  for (cluster::Device& d : devices) {
    if (d.kind != "cpu") continue;
    if (d.threads == 0) {
      ++unsaid;
    } else if (d.threads < profiled && how.thread_speedup > 0) {
      d.speed /= threadTimeFactor(profiled, how.thread_speedup, d.threads);
      ++brought[d.threads];
    } else if (d.threads < profiled) {
      ++fewer[d.threads];
    } else if (d.threads > profiled) {
      ++more[d.threads];
    }
  }
  const std::string timed_on = "the profile was timed on " + threadsText(profiled);
  for (const auto& [threads, n] : brought)
    addSentence(fit.note, timed_on + ", where a training step ran " + text::fixed(how.thread_speedup, 2) +
                              "x as fast as on 1; the " + devicesText(n) + " on " + threadsText(threads) +
                              " are priced at " +
                              text::fixed(threadTimeFactor(profiled, how.thread_speedup, threads), 2) +
                              "x its times (Amdahl's law through those two points)");
  if (!fewer.empty())
    addSentence(fit.note, timed_on + " and did not time a step on one, so the CPU devices on fewer, on " +
                              threadCounts(fewer) +
                              ", are priced as profiled, likely too fast: profile with --threads as their ranks "
                              "compute, or standalone without --share (which times a step on one thread too)");
  if (!more.empty())
    addSentence(fit.note, timed_on + "; the CPU devices on more, on " + threadCounts(more) +
                              ", are priced as profiled, likely too slow: profile with --threads as their ranks "
                              "compute");
  if (unsaid >= 2 && profiled > 1 && how.shares == 1)
    addSentence(fit.note,
                "this profile was taken by one process timing the whole model on " + threadsText(profiled) +
                    "; ranks that share a host's cores each compute on fewer, and hold only their stage, so the "
                    "predictions for these " + devicesText(unsaid) +
                    " are likely too fast (on a 2-core host, 2 ranks ran at about half of it). Say each device's "
                    "\"threads\" in the cluster and the profile is priced at them" +
                    (how.thread_speedup > 0 ? "" : " once it measured its speed-up (profile again, standalone)") +
                    ", or profile as the ranks run (`profile --threads T --share K/P`, one process per rank at "
                    "once), or let `train --batch` plan");
  if (!brought.empty())
    fit.cluster = cluster::ClusterSpec(std::move(devices), cluster.levels(), cluster.links(), "cluster",
                                       cluster.sharedCores());
  return fit;
}

}  // namespace pipetrain::planner
