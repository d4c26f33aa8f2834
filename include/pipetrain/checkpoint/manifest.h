// A checkpoint's manifest: what a checkpoint folder holds and how to check it. The
// runtime writes and loads the tensors (include/pipetrain/torch/checkpoint.h); this is
// the part without LibTorch, so the readers' fuzzer and the core tests cover it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/plan/plan.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::checkpoint {

inline constexpr const char* kManifestFile = "manifest.json";

// Where training stands between two mini-batches.
struct Position {
  int epoch = 0;            // 0-based
  int64_t step = 0;         // the next mini-batch within the epoch
  int64_t minibatches = 0;  // trained in all
};

// What a checkpoint must agree on with the run that resumes from it (the plan may differ).
struct Identity {
  std::string model;                  // the zoo's name, or the TorchScript file's stem
  std::string model_file;             // the TorchScript file, when the model is the user's
  std::string optimizer;
  int64_t samples_per_minibatch = 0;  // the data position counts mini-batches of this size
  uint64_t seed = 0;                  // the data order
  std::string data;                   // the dataset's name or the user's data file

  // The first field that differs from `resumed`, as "the seed (checkpoint 1, this run 2)";
  // empty when none does.
  std::string differenceFrom(const Identity& resumed) const;
};

struct FileEntry {
  std::string name;  // in the checkpoint's folder
  int64_t bytes = 0;
  uint32_t crc32 = 0;
};

struct TensorEntry {
  std::string name;            // the parameter's or buffer's name within its layer
  std::vector<int64_t> shape;
};

struct LayerEntry {
  std::string name;
  std::string file;                  // the file holding its tensors
  std::vector<TensorEntry> tensors;  // parameters, then buffers
};

struct Manifest {
  Position position;
  Identity identity;
  plan::Plan plan;
  int world_size = 0;
  double written_at = 0;  // seconds since the Unix epoch: orders two runs' checkpoints of one step
  std::vector<FileEntry> files;
  std::vector<LayerEntry> layers;

  json_io::Json toJson() const;
  // Strict: every field checked, a layer's file must be one of `files`; Error names
  // `origin` and the field.
  static Manifest fromJson(const json_io::Json& j, const std::string& origin);
  static Manifest load(const std::string& path);

  const LayerEntry* layer(const std::string& name) const;
  const FileEntry* file(const std::string& name) const;
};

// CRC-32 (the zlib and PNG polynomial) of `size` bytes.
uint32_t crc32(const char* data, std::size_t size);

// Checks `dir`'s files against its manifest: each present, of its size and CRC. Returns
// "" when all match, else what is wrong, naming the file ("rank-1.pt: truncated, 812 of
// 4096 bytes").
std::string checkFiles(const Manifest& manifest, const std::string& dir);

}  // namespace pipetrain::checkpoint
