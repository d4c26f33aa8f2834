// A mutation fuzzer for pipetrain's readers: it takes the worked example (a layer graph,
// a cluster, a plan), a CSV schedule and a checkpoint manifest, mutates one of them at a time (extreme numbers,
// byte edits, truncation, deep nesting, NUL bytes, swapped names), and runs what
// `simulate` would run on it: read, validate, build the Program, simulate (for a
// manifest: what `--resume` and `export` read before any tensor: the manifest, its files). Every input
// must end in success or in a pipetrain::Error; any other exception is a finding, and a
// crash or sanitizer report fails the run outright. Findings are written to files so
// that they can be replayed.
//
//   mutate_readers GRAPH CLUSTER PLAN CSV MANIFEST --seconds N [--seed S] [--findings DIR]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipetrain/checkpoint/manifest.h"
#include "pipetrain/plan/plan.h"
#include "pipetrain/schedule/csv_schedule.h"
#include "pipetrain/schedule/program_check.h"
#include "pipetrain/sim/evaluate.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/json_io.h"
#include "pipetrain/util/text.h"

namespace pt = pipetrain;

namespace {

// Numbers that have broken readers before: range edges, overflow, non-finite, denormal.
const std::vector<std::string> kExtremes = {
    "0",     "-1",       "1e309",   "-1e309", "2147483647", "2147483648", "9223372036854775807", "18446744073709551615",
    "1e-310", "4.9e-324", "-0",     "0.5",    "1e18",       "65537",      "100000",              "46341",
    "NaN",   "Infinity", "\"inf\"", "null",   "true",       "[]",         "{}",                  "\"x\""};

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  std::string mutate(std::string s) {
    if (s.empty()) return s;
    switch (pick(8)) {
      case 0: return replaceNumber(std::move(s));
      case 1: s[pick(s.size())] = static_cast<char>(pick(256)); return s;
      case 2: s.erase(pick(s.size()), 1 + pick(8)); return s;
      case 3: return s.substr(0, pick(s.size()));
      case 4: {
        const std::size_t at = pick(s.size()), len = 1 + pick(64);
        s.insert(pick(s.size()), s.substr(at, len));
        return s;
      }
      case 5: {  // nest a value deeply
        const std::size_t at = s.find(':', pick(s.size()));
        if (at == std::string::npos) return s;
        const std::size_t depth = 1 + pick(200);
        const std::size_t end = s.find_first_of(",}", at);
        if (end == std::string::npos) return s;
        return s.substr(0, at + 1) + std::string(depth, '[') + s.substr(at + 1, end - at - 1) + std::string(depth, ']') +
               s.substr(end);
      }
      case 6: s.insert(pick(s.size()), std::string(1, '\0')); return s;
      default: return replaceNumber(replaceNumber(std::move(s)));
    }
  }

 private:
  std::size_t pick(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }

  std::string replaceNumber(std::string s) {
    // The n-th run of digits (with sign, point and exponent) becomes an extreme value.
    std::vector<std::pair<std::size_t, std::size_t>> runs;
    for (std::size_t i = 0; i < s.size();) {
      if (std::isdigit(static_cast<unsigned char>(s[i]))) {
        std::size_t j = i;
        while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.' || s[j] == 'e' ||
                                s[j] == 'E' || s[j] == '-' || s[j] == '+'))
          ++j;
        runs.push_back({i, j - i});
        i = j;
      } else {
        ++i;
      }
    }
    if (runs.empty()) return s;
    const auto [at, len] = runs[pick(runs.size())];
    return s.replace(at, len, kExtremes[pick(kExtremes.size())]);
  }

  std::mt19937_64 rng_;
};

void writeFile(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

// What `simulate --graph --cluster --plan` and `schedule --csv` do with their files.
void simulateFiles(const std::string& graph_path, const std::string& cluster_path, const std::string& plan_path) {
  const auto graph = pt::graph::LayerGraph::load(graph_path);
  const auto cluster = pt::cluster::ClusterSpec::load(cluster_path);
  const auto plan = pt::plan::Plan::load(plan_path);
  pt::plan::validate(plan, graph, cluster, plan_path);
  // Accepted input must give sensible numbers (once: null times from infinite speeds,
  // 0 peak memory from a wrapped byte count).
  const pt::sim::Report r = pt::sim::evaluatePlan(graph, cluster, plan).report;
  if (!std::isfinite(r.iteration_time) || !(r.iteration_time > 0) || !std::isfinite(r.throughput) ||
      r.peakMemoryBytes() < 0)
    throw std::runtime_error("accepted, but the simulation gives iteration " + std::to_string(r.iteration_time) +
                             " s, peak memory " + std::to_string(r.peakMemoryBytes()));
}

void simulateCsv(const std::string& csv_path) {
  const pt::schedule::Program program = pt::schedule::programFromCsv(pt::text::readFile(csv_path), csv_path);
  pt::schedule::validate(program);
}

void readManifest(const std::string& path) {
  const auto manifest = pt::checkpoint::Manifest::load(path);
  pt::checkpoint::checkFiles(manifest, std::filesystem::path(path).parent_path().string());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::cerr << "usage: mutate_readers GRAPH CLUSTER PLAN CSV MANIFEST [--seconds N] [--seed S] [--findings DIR]\n";
    return 2;
  }
  std::vector<std::string> seeds(argv + 1, argv + 6);
  double seconds = 10;
  uint64_t seed = 1;
  std::string findings = ".";
  for (int i = 6; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--seconds") seconds = std::atof(argv[i + 1]);
    else if (flag == "--seed") seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (flag == "--findings") findings = argv[i + 1];
  }
  std::vector<std::string> originals;
  for (const auto& path : seeds) originals.push_back(pt::text::readFile(path));
  // The unmutated files must pass: otherwise every mutation "fails" for nothing.
  simulateFiles(seeds[0], seeds[1], seeds[2]);
  simulateCsv(seeds[3]);
  readManifest(seeds[4]);

  Mutator mutator(seed);
  std::mt19937_64 choose(seed ^ 0x9E3779B97F4A7C15ULL);
  const std::string dir = findings + "/mutate-" + std::to_string(seed);
  const std::string mutated[] = {dir + ".graph.json", dir + ".cluster.json", dir + ".plan.json", dir + ".csv",
                                 dir + ".manifest.json"};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int64_t runs = 0, refused = 0, problems = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::size_t which = choose() % originals.size();
    for (std::size_t i = 0; i < originals.size(); ++i) writeFile(mutated[i], originals[i]);
    writeFile(mutated[which], mutator.mutate(originals[which]));
    ++runs;
    try {
      if (which == 3) simulateCsv(mutated[3]);
      else if (which == 4) readManifest(mutated[4]);
      else simulateFiles(mutated[0], mutated[1], mutated[2]);
    } catch (const pt::Error&) {
      ++refused;
    } catch (const std::exception& e) {
      ++problems;
      const std::string kept = dir + ".finding-" + std::to_string(problems) + (which == 3 ? ".csv" : ".json");
      std::rename(mutated[which].c_str(), kept.c_str());
      std::cerr << "finding: " << kept << ": " << e.what() << "\n";
    }
  }
  for (const auto& path : mutated) std::remove(path.c_str());
  std::printf("mutate_readers: %lld inputs in %.0f s (seed %llu): %lld refused with a message, %lld accepted, "
              "%lld other exceptions\n",
              static_cast<long long>(runs), seconds, static_cast<unsigned long long>(seed),
              static_cast<long long>(refused), static_cast<long long>(runs - refused - problems),
              static_cast<long long>(problems));
  return problems == 0 ? 0 : 1;
}
