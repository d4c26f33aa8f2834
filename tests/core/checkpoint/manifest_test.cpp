// The checkpoint manifest: it round-trips, its checksum is the standard CRC-32, it
// refuses what is malformed naming the field, and checkFiles names the file at fault.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../expect_error.h"
#include "pipetrain/checkpoint/manifest.h"
#include "pipetrain/plan/plan_program.h"

namespace pipetrain::checkpoint {
namespace {

using testing::expectError;

Manifest example() {
  Manifest m;
  m.position = {1, 3, 8};
  m.identity = {"mlp", "", "adam", 16, 18446744073709551615ull, "synthetic"};
  m.plan = plan::chainPlan({"a", "b"}, {0, 1, 2}, {1, 1}, plan::ScheduleOptions{}, 4, 4);
  m.world_size = 2;
  m.written_at = 1.7e9;
  m.files = {{"rank-0.pt", 5, crc32("hello", 5)}, {"rank-1.pt", 0, crc32("", 0)}};
  m.layers = {{"a", "rank-0.pt", {{"weight", {4, 2}}, {"bias", {4}}}}, {"b", "rank-1.pt", {}}};
  return m;
}

TEST(Manifest, Crc32IsTheStandardOne) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);  // the published check value
  EXPECT_EQ(crc32("", 0), 0u);
}

TEST(Manifest, RoundTripsEveryField) {
  const Manifest m = example();
  const Manifest back = Manifest::fromJson(m.toJson(), "manifest.json");
  EXPECT_EQ(back.toJson(), m.toJson());
  EXPECT_EQ(back.identity.seed, 18446744073709551615ull);  // a 64-bit seed survives JSON
  ASSERT_NE(back.layer("a"), nullptr);
  EXPECT_EQ(back.layer("a")->tensors[0].shape, (std::vector<int64_t>{4, 2}));
}

TEST(Manifest, RefusesWhatIsMalformedNamingTheField) {
  auto with = [](const std::function<void(json_io::Json&)>& edit) {
    json_io::Json j = example().toJson();
    edit(j);
    return [j] { Manifest::fromJson(j, "m.json"); };
  };
  expectError(with([](auto& j) { j["layers"][0]["file"] = "rank-7.pt"; }), {"m.json", "layers[0].file", "rank-7.pt"});
  expectError(with([](auto& j) { j["files"][0]["name"] = "../../etc/passwd"; }), {"files[0].name", "own folder"});
  expectError(with([](auto& j) { j["identity"]["seed"] = "-1"; }), {"identity.seed", "expected a seed"});
  expectError(with([](auto& j) { j["position"]["step"] = -4; }), {"position.step"});
  expectError(with([](auto& j) { j["files"][0]["crc32"] = 4294967296.0; }), {"files[0].crc32"});
  expectError(with([](auto& j) { j["layers"][1]["name"] = "a"; }), {"layer 'a' appears twice"});
  expectError(with([](auto& j) { j["version"] = 2; }), {"version 2 is not supported"});
  expectError(with([](auto& j) { j["extra"] = 1; }), {"extra"});
}

TEST(Manifest, IdentityNamesTheFirstDifference) {
  const Identity a = example().identity;
  Identity b = a;
  EXPECT_EQ(a.differenceFrom(b), "");
  b.samples_per_minibatch = 32;
  EXPECT_EQ(a.differenceFrom(b), "samples per mini-batch (checkpoint 16, this run 32)");
}

TEST(Manifest, CheckFilesNamesTheFileAtFault) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "manifest-files";
  std::filesystem::create_directories(dir);
  const Manifest m = example();
  std::ofstream(dir / "rank-0.pt", std::ios::binary) << "hello";
  std::ofstream(dir / "rank-1.pt", std::ios::binary);
  EXPECT_EQ(checkFiles(m, dir.string()), "");
  std::ofstream(dir / "rank-0.pt", std::ios::binary) << "hellO";
  EXPECT_EQ(checkFiles(m, dir.string()), "rank-0.pt: corrupted (its CRC-32 does not match the manifest's)");
  std::ofstream(dir / "rank-0.pt", std::ios::binary) << "hel";
  EXPECT_EQ(checkFiles(m, dir.string()), "rank-0.pt: truncated, 3 of 5 bytes");
  std::filesystem::remove(dir / "rank-0.pt");
  EXPECT_EQ(checkFiles(m, dir.string()), "rank-0.pt: missing");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pipetrain::checkpoint
