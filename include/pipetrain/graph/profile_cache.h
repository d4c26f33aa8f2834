// Layer profiles kept between runs. `train` measures its model's layers before it plans
// (minutes for ResNet-50 on two cores), and the same model, sizes, threads and machine
// give the same profile, so a cache keyed by everything the measurement depends on lets
// the next run plan at once. Each entry is two files in the cache folder: DIGEST.json,
// an ordinary layer graph (`plan --graph` reads it), and DIGEST.key.json, the key it was
// taken under and what taking it cost. An entry counts only when its key matches field
// for field, so a digest collision or a half-written entry is a miss, never a wrong
// profile.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pipetrain/graph/layer_graph.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::graph {

// What a profile depends on, as named values in a fixed order.
class ProfileKey {
 public:
  void add(const std::string& name, const std::string& value);
  const std::vector<std::pair<std::string, std::string>>& fields() const { return fields_; }
  // 16 hex digits naming the entry (FNV-1a over the fields).
  std::string digest() const;
  // The fields as [[name, value], ...], as an entry's key file holds them.
  json_io::Json toJson() const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

// 16 hex digits of a file's bytes (FNV-1a): a model file's identity for the key.
// Throws Error naming the file when it cannot be read.
std::string fileDigest(const std::string& path);

struct CachedProfile {
  LayerGraph graph;
  std::string path;               // the layer graph's file
  double profiling_seconds = 0;   // what measuring it took
  std::string created;            // when, UTC, ISO 8601
  int runs_merged = 0;            // training runs whose measured stage times refined it
};

class ProfileCache {
 public:
  explicit ProfileCache(std::string dir);
  // $PIPETRAIN_CACHE_DIR, else $XDG_CACHE_HOME/pipetrain/profiles, else
  // $HOME/.cache/pipetrain/profiles.
  static std::string defaultDir();

  const std::string& dir() const { return dir_; }
  std::string graphPath(const ProfileKey& key) const;
  // The entry for `key`, or nothing. An entry that cannot be read, or whose key differs,
  // is nothing too, and `problem` (when given) says why, for the caller to print.
  std::optional<CachedProfile> find(const ProfileKey& key, std::string* problem = nullptr) const;
  // Writes (or replaces) the entry; returns the layer graph's path. Throws Error naming
  // the folder when it cannot be written.
  std::string store(const ProfileKey& key, const LayerGraph& graph, double profiling_seconds) const;
  // Replaces the graph of the entry whose layer graph file is `graph_path` (from find or
  // store) with one a run sharpened, and counts the run; returns the runs merged now.
  // Throws Error naming the file when the entry is gone or damaged.
  int refine(const std::string& graph_path, const LayerGraph& graph) const;

 private:
  std::string keyPath(const ProfileKey& key) const;
  std::string dir_;
};

}  // namespace pipetrain::graph
