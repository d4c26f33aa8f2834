#include "pipetrain/graph/profile_cache.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "pipetrain/util/error.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::graph {
namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ull, kFnvPrime = 1099511628211ull;

uint64_t fnv(uint64_t h, const char* data, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(data[i])) * kFnvPrime;
  return h;
}

std::string hex(uint64_t h) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(h));
  return s;
}

std::string nowUtc() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char s[32];
  std::strftime(s, sizeof s, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return s;
}

}  // namespace

json_io::Json ProfileKey::toJson() const {
  json_io::Json fields = json_io::Json::array();
  for (const auto& [name, value] : fields_) fields.push_back({name, value});
  return fields;
}

void ProfileKey::add(const std::string& name, const std::string& value) { fields_.emplace_back(name, value); }

std::string ProfileKey::digest() const {
  uint64_t h = kFnvOffset;
  for (const auto& [name, value] : fields_) {
    // Lengths first, so that ("ab", "c") and ("a", "bc") differ.
    const std::string lengths = std::to_string(name.size()) + ":" + std::to_string(value.size()) + ":";
    h = fnv(h, lengths.data(), lengths.size());
    h = fnv(h, name.data(), name.size());
    h = fnv(h, value.data(), value.size());
  }
  return hex(h);
}

std::string fileDigest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot be read");
  uint64_t h = kFnvOffset;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    h = fnv(h, buffer.data(), static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) throw Error(path + ": cannot be read");
  return hex(h);
}

ProfileCache::ProfileCache(std::string dir) : dir_(std::move(dir)) {}

std::string ProfileCache::defaultDir() {
  if (const char* d = std::getenv("PIPETRAIN_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/pipetrain/profiles";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/pipetrain/profiles";
  return (std::filesystem::temp_directory_path() / "pipetrain-profiles").string();
}

std::string ProfileCache::graphPath(const ProfileKey& key) const {
  return (std::filesystem::path(dir_) / (key.digest() + ".json")).string();
}

std::string ProfileCache::keyPath(const ProfileKey& key) const {
  return (std::filesystem::path(dir_) / (key.digest() + ".key.json")).string();
}

std::optional<CachedProfile> ProfileCache::find(const ProfileKey& key, std::string* problem) const {
  const std::string key_file = keyPath(key);
  std::error_code ec;
  if (!std::filesystem::exists(key_file, ec)) return std::nullopt;
  try {
    const json_io::Json k = json_io::readFile(key_file);
    if (!k.is_object() || k.value("key", json_io::Json()) != key.toJson())
      throw Error(key_file + ": taken under another key");
    CachedProfile c{LayerGraph::load(graphPath(key)), graphPath(key), k.value("profiling_seconds", 0.0),
                    k.value("created", std::string()), k.value("runs_merged", 0)};
    return c;
  } catch (const std::exception& e) {
    if (problem) *problem = e.what();
    return std::nullopt;
  }
}

std::string ProfileCache::store(const ProfileKey& key, const LayerGraph& graph, double profiling_seconds) const {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw Error("profile cache " + dir_ + ": cannot create the folder (" + ec.message() + ")");
  // The key last: an entry whose graph was not written completely has no key yet.
  std::filesystem::remove(keyPath(key), ec);
  json_io::writeFile(graphPath(key), graph.toJson());
  json_io::writeFile(keyPath(key), {{"format", "pipetrain.profile-cache-key"},
                                    {"version", 1},
                                    {"key", key.toJson()},
                                    {"profiling_seconds", profiling_seconds},
                                    {"created", nowUtc()},
                                    {"runs_merged", 0}});
  return graphPath(key);
}

int ProfileCache::refine(const std::string& graph_path, const LayerGraph& graph) const {
  const std::string suffix = ".json";
  if (graph_path.size() <= suffix.size() || graph_path.compare(graph_path.size() - suffix.size(), suffix.size(), suffix))
    throw Error(graph_path + ": not a profile cache entry");
  const std::string key_path = graph_path.substr(0, graph_path.size() - suffix.size()) + ".key.json";
  json_io::Json k = json_io::readFile(key_path);
  if (!k.is_object() || !k.contains("key")) throw Error(key_path + ": not a profile cache key");
  const int runs = k.value("runs_merged", 0) + 1;
  k["runs_merged"] = runs;
  json_io::writeFile(graph_path, graph.toJson());
  json_io::writeFile(key_path, k);
  return runs;
}

}  // namespace pipetrain::graph
