// What a mutation test of the readers and the CLI numbers found (issue 11): every case
// now ends in an Error that names the file or field, before any work that grows with
// the numbers, instead of a crash, minutes of work, or a silently wrong result.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "../expect_error.h"
#include "pipetrain/cluster/cluster_spec.h"
#include "pipetrain/graph/layer_graph.h"
#include "pipetrain/plan/plan.h"
#include "pipetrain/planner/explore.h"
#include "pipetrain/schedule/csv_schedule.h"
#include "pipetrain/schedule/program_check.h"
#include "pipetrain/schedule/schedules.h"
#include "pipetrain/sim/evaluate.h"
#include "pipetrain/util/json_io.h"
#include "pipetrain/util/limits.h"

namespace pipetrain {
namespace {

using testing::expectError;
using json_io::Json;

std::string writeTemp(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

TEST(HostileInput, JsonReaderRefusesWhatItCannotServe) {
  // ~100,000 levels once overflowed the stack when an error message printed the value.
  const std::string deep = "{\"a\": " + std::string(100000, '[') + "1" + std::string(100000, ']') + "}";
  expectError([&] { json_io::readFile(writeTemp("deep.json", deep)); }, {"deep.json", "nested deeper than 64"});
  expectError([&] { json_io::readFile(writeTemp("nul.json", std::string("{}\0{\"x\": 1}", 11))); },
              {"nul.json", "NUL", "byte 3"});
  expectError([&] { json_io::readFile(writeTemp("huge.json", "{\"x\": 1e309}")); }, {"huge.json", "1e309"});
  const Json big = Json::parse("{\"n\": 18446744073709551615}");
  expectError([&] { json_io::JsonCursor(big, "big.json").field("n").asInt(); }, {"big.json", "n", "too large"});
}

Json layer(const std::string& name, int64_t output_bytes) {
  return {{"name", name}, {"forward_seconds", 1e-3}, {"backward_seconds", 2e-3}, {"output_bytes", output_bytes},
          {"param_bytes", 1000}};
}

TEST(HostileInput, AbsurdSizesAndRatesAreRefusedByName) {
  // 2^62 bytes once made `plan` report 0 peak memory (an out-of-range cast) and exit 0.
  const Json graph = {{"format", "pipetrain.layer_graph"}, {"version", 1}, {"batch_size", 1},
                      {"layers", {layer("a", int64_t{1} << 62)}}};
  expectError([&] { graph::LayerGraph::fromJson(graph, "g.json"); }, {"g.json", "output_bytes", "between"});
  Json cluster = {{"format", "pipetrain.cluster"}, {"version", 1},
                  {"devices", {{{"name", "d0"}, {"memory_bytes", 1 << 30}, {"speed", 1e-310}}}},
                  {"levels", {{{"name", "n"}, {"group_size", 1}, {"bandwidth", 1e9}, {"latency", 0}}}}};
  expectError([&] { cluster::ClusterSpec::fromJson(cluster, "c.json"); }, {"c.json", "speed"});
  cluster["devices"][0]["speed"] = 1.0;
  cluster["levels"][0]["latency"] = 1e300;
  expectError([&] { cluster::ClusterSpec::fromJson(cluster, "c.json"); }, {"c.json", "latency"});
}

TEST(HostileInput, ProgramsTooLargeToServeAreRefusedUpFront) {
  // Once std::bad_alloc or minutes of work at 4-6 GB.
  const Json plan = {{"format", "pipetrain.plan"}, {"version", 1}, {"microbatch_size", 1},
                     {"microbatches", 2147483647}, {"schedule", "1f1b"},
                     {"stages", {{{"layers", {"a"}}, {"devices", {"d0"}}}}}};
  expectError([&] { plan::Plan::fromJson(plan, "p.json"); }, {"p.json", "microbatches", "65536"});
  schedule::ScheduleSpec spec;
  spec.microbatches = 4;
  expectError([&] { schedule::buildProgram(spec, schedule::chainDag(100000), {}); }, {"100000 stages", "at most"});
  spec.minibatches = 10000000;
  expectError([&] { schedule::buildProgram(spec, schedule::chainDag(2), {}); }, {"10000000 mini-batches"});
  plan::ScheduleOptions interleaved;
  interleaved.name = "interleaved";
  interleaved.chunks = 46341;  // x 46341 stages once overflowed int ("found -2147479015")
  expectError([&] { sim::uniformScenario(interleaved, 46341, 4, 1, 2, 0); }, {"--chunks", "8192"});
  expectError([&] { sim::uniformScenario({}, 2, 4, NAN, NAN, NAN); }, {"--uniform"});
  planner::ExploreOptions o;
  o.global_batch = 2147483647;  // odd: micro-batches of 1, two billion of them
  expectError([&] { planner::explore(graph::LayerGraph::uniformChain(4, 1e-3, 1e-3, 1e-3, 100, 100),
                                     cluster::ClusterSpec::uniform(2, 1 << 30, 1e9, 0), o); },
              {"2147483647", "65536 micro-batches"});
}

TEST(HostileInput, CsvSchedulesNameTheFileAndCell) {
  expectError([&] { schedule::programFromCsv("0F0,0B99999999\n", "big.csv"); }, {"big.csv", "line 1", "column 2"});
  expectError([&] { schedule::programFromCsv("0F0,0B0\n1F0,1B0,1B0\n", "dup.csv"); },
              {"dup.csv", "line 2, column 3", "first scheduled at line 2, column 2"});
  // A validator finding on a user's CSV names the file, not "csv".
  expectError([&] { schedule::validate(schedule::programFromCsv("0F0,0F1,0B0\n1F0,1B0,1F1,1B1\n", "missing.csv")); },
              {"missing.csv", "micro-batch 1"});
}

}  // namespace
}  // namespace pipetrain
