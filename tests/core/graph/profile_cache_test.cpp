// ProfileCache: a profile comes back under its own key only, and a damaged entry is a
// miss that says why.
#include "pipetrain/graph/profile_cache.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "pipetrain/util/error.h"

namespace pipetrain::graph {
namespace {

class ProfileCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("pipetrain-cache-test-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

ProfileKey keyOf(const std::string& model, const std::string& sizes) {
  ProfileKey key;
  key.add("model", model);
  key.add("sizes", sizes);
  return key;
}

TEST_F(ProfileCacheTest, AProfileComesBackUnderItsKeyOnly) {
  const ProfileCache cache(dir_.string());
  const LayerGraph graph = LayerGraph::uniformChain(4, 1e-3, 2e-3, 1e-3, 1000, 100);
  EXPECT_FALSE(cache.find(keyOf("mlp", "32")));
  const std::string path = cache.store(keyOf("mlp", "32"), graph, 12.5);
  EXPECT_EQ(path, cache.graphPath(keyOf("mlp", "32")));
  const auto found = cache.find(keyOf("mlp", "32"));
  ASSERT_TRUE(found);
  EXPECT_EQ(found->graph.toJson(), graph.toJson());
  EXPECT_EQ(found->profiling_seconds, 12.5);
  EXPECT_EQ(found->runs_merged, 0);
  EXPECT_FALSE(found->created.empty());
  // The entry is an ordinary layer graph file.
  EXPECT_EQ(LayerGraph::load(path).toJson(), graph.toJson());
  EXPECT_FALSE(cache.find(keyOf("mlp", "32,128")));
  EXPECT_FALSE(cache.find(keyOf("gpt", "32")));
}

TEST_F(ProfileCacheTest, FieldsAreNotConfusedByWhereOneEnds) {
  ProfileKey a, b;
  a.add("model", "ab");
  a.add("sizes", "c");
  b.add("model", "a");
  b.add("sizes", "bc");
  EXPECT_NE(a.digest(), b.digest());
  EXPECT_EQ(a.digest(), keyOf("ab", "c").digest());
  EXPECT_EQ(a.digest().size(), 16u);
}

TEST_F(ProfileCacheTest, ADamagedEntryIsAMissThatSaysWhy) {
  const ProfileCache cache(dir_.string());
  const ProfileKey key = keyOf("mlp", "32");
  cache.store(key, LayerGraph::uniformChain(2, 1e-3, 1e-3, 1e-3, 10, 10), 1.0);
  std::ofstream(cache.graphPath(key)) << "{\"format\": \"pipetrain.layer_graph\", \"layers\": [";
  std::string problem;
  EXPECT_FALSE(cache.find(key, &problem));
  EXPECT_NE(problem.find(cache.graphPath(key)), std::string::npos) << problem;
  // Storing again repairs it.
  cache.store(key, LayerGraph::uniformChain(2, 1e-3, 1e-3, 1e-3, 10, 10), 1.0);
  EXPECT_TRUE(cache.find(key));
}

TEST_F(ProfileCacheTest, AnUnwritableFolderIsNamed) {
  std::filesystem::create_directories(dir_);
  std::ofstream(dir_ / "file") << "x";
  const ProfileCache cache((dir_ / "file" / "sub").string());
  try {
    cache.store(keyOf("mlp", "32"), LayerGraph::uniformChain(2, 1e-3, 1e-3, 1e-3, 10, 10), 1.0);
    FAIL() << "stored into a folder under a file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("file/sub"), std::string::npos) << e.what();
  }
}

TEST_F(ProfileCacheTest, FileDigestsFollowTheBytes) {
  std::filesystem::create_directories(dir_);
  std::ofstream(dir_ / "a") << "model bytes";
  std::ofstream(dir_ / "b") << "model bytez";
  EXPECT_EQ(fileDigest((dir_ / "a").string()), fileDigest((dir_ / "a").string()));
  EXPECT_NE(fileDigest((dir_ / "a").string()), fileDigest((dir_ / "b").string()));
  EXPECT_THROW(fileDigest((dir_ / "missing").string()), Error);
}

}  // namespace
}  // namespace pipetrain::graph
