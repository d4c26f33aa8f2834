#include "pipetrain/torch/checkpoint.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/script.h>

#include "pipetrain/torch/models.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/text.h"

namespace pipetrain::runtime {
namespace {

namespace fs = std::filesystem;
using checkpoint::Manifest;

// A rank's file: tensors by key.
using Shard = c10::Dict<std::string, torch::Tensor>;

// Keys of a rank's file (checkpoint.h).
std::string tensorKey(const std::string& layer, const std::string& name) { return layer + "/" + name; }
std::string stateKey(const std::string& tensor_key, const std::string& field) { return tensor_key + "#" + field; }
std::string stepsKey(const std::string& layer) { return layer + "#steps"; }
constexpr const char* kRngKey = "#rng";

std::string fileOfRank(int rank) { return "rank-" + std::to_string(rank) + ".pt"; }

std::string folderName(int64_t minibatches, int64_t run) {
  char name[64];
  std::snprintf(name, sizeof name, "step-%08lld.%lld", static_cast<long long>(minibatches), static_cast<long long>(run));
  return name;
}

// Newer checkpoints compare greater: more mini-batches trained, then written later (a
// restarted run's checkpoint of a step beats the failed run's).
std::pair<int64_t, double> recency(const Manifest& m) { return {m.position.minibatches, m.written_at}; }

// The folders under `root` that checkpoints are written to (folderName), complete or not.
std::vector<fs::path> checkpointFolders(const fs::path& root) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec))
    if (entry.is_directory() && entry.path().filename().string().rfind("step-", 0) == 0) out.push_back(entry.path());
  return out;
}

// The stages whose state this rank writes: those whose micro-batch-0 replica it runs
// (every replica holds the same state).
std::vector<int> stagesWritten(const RankState& s, int rank) {
  std::vector<int> out;
  for (int stage = 0; stage < s.program.num_stages; ++stage)
    if (s.program.rankOf(stage, 0) == rank) out.push_back(stage);
  return out;
}

// What a rank writes. Every tensor goes in as a CPU copy, so that a checkpoint written
// on one kind of device resumes on another.
Shard shardOf(const RankState& s, int rank) {
  Shard shard;
  auto add = [&shard](const std::string& key, const torch::Tensor& t) { shard.insert(key, t.detach().cpu()); };
  for (int stage : stagesWritten(s, rank)) {
    const auto state = s.executor.parameterState(stage);
    std::size_t i = 0;  // the stage's parameters, in models::Model::parameters order
    for (int l : s.stages[stage].layers) {
      const std::string& layer = s.model.layers[l].name;
      const auto& module = *s.model.layers[l].module.ptr();
      for (const auto& p : module.named_parameters()) {
        const std::string key = tensorKey(layer, p.key());
        add(key, p.value());
        for (const auto& [field, tensor] : state.at(i)) add(stateKey(key, field), tensor);
        ++i;
      }
      for (const auto& b : module.named_buffers()) add(tensorKey(layer, b.key()), b.value());
      add(stepsKey(layer), torch::tensor(s.executor.stepsTaken(stage), torch::kLong));
    }
  }
  shard.insert(kRngKey, at::detail::getDefaultCPUGenerator().get_state());
  return shard;
}

std::vector<checkpoint::LayerEntry> layerEntries(const RankState& s) {
  std::vector<checkpoint::LayerEntry> out;
  for (int stage = 0; stage < s.program.num_stages; ++stage)
    for (int l : s.stages[stage].layers) {
      checkpoint::LayerEntry e{s.model.layers[l].name, fileOfRank(s.program.rankOf(stage, 0)), {}};
      const auto& module = *s.model.layers[l].module.ptr();
      for (const auto& p : module.named_parameters()) e.tensors.push_back({p.key(), p.value().sizes().vec()});
      for (const auto& b : module.named_buffers()) e.tensors.push_back({b.key(), b.value().sizes().vec()});
      out.push_back(std::move(e));
    }
  return out;
}

// Rank 0, after a checkpoint is complete: the newest `keep` stay; older ones and folders
// that a crash left without a manifest go.
void prune(const fs::path& root, const fs::path& written, int keep) {
  std::vector<std::pair<std::pair<int64_t, double>, fs::path>> complete;
  std::error_code ec;
  for (const fs::path& dir : checkpointFolders(root)) {
    if (dir == written) continue;
    try {
      const Manifest m = Manifest::load((dir / checkpoint::kManifestFile).string());
      complete.push_back({recency(m), dir});
    } catch (const Error&) {
      fs::remove_all(dir, ec);  // incomplete: never a checkpoint
    }
  }
  std::sort(complete.rbegin(), complete.rend());
  for (std::size_t i = std::max(keep - 1, 0); i < complete.size(); ++i) fs::remove_all(complete[i].second, ec);
}

Shard readShard(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open file");
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    const c10::IValue v = torch::pickle_load(bytes);
    Shard out;
    for (const auto& item : v.toGenericDict()) out.insert(item.key().toStringRef(), item.value().toTensor());
    return out;
  } catch (const c10::Error& e) {
    throw Error(path + ": not a checkpoint file pipetrain wrote (" + std::string(e.what_without_backtrace()) + ")");
  }
}

// A checkpoint's rank files, each read once when first needed.
class Shards {
 public:
  explicit Shards(const Checkpoint& c) : c_(c) {}
  const Shard& file(const std::string& name) {
    auto it = read_.find(name);
    if (it == read_.end()) it = read_.emplace(name, readShard((fs::path(c_.dir) / name).string())).first;
    return it->second;
  }
  // The tensor under `key` in file `name`, which the manifest says is there.
  torch::Tensor tensor(const std::string& name, const std::string& key) {
    const Shard& shard = file(name);
    auto it = shard.find(key);
    if (it == shard.end()) throw Error("checkpoint " + c_.dir + ": " + name + " lacks '" + key + "' that the manifest lists");
    return it->value();
  }

 private:
  const Checkpoint& c_;
  std::map<std::string, Shard> read_;
};

Checkpoint readChecked(const fs::path& dir) {
  const std::string manifest = (dir / checkpoint::kManifestFile).string();
  if (!fs::exists(manifest))
    throw Error(dir.string() + ": no " + std::string(checkpoint::kManifestFile) +
                " (an incomplete checkpoint, or not a checkpoint folder)");
  Checkpoint c{dir.string(), Manifest::load(manifest)};
  const std::string problem = checkpoint::checkFiles(c.manifest, c.dir);
  if (!problem.empty()) throw Error("checkpoint " + c.dir + ": " + problem);
  return c;
}

}  // namespace

namespace {

// The newest intact checkpoint in a folder of them, if any.
std::optional<Checkpoint> newestIntact(const fs::path& root) {
  std::optional<Checkpoint> best;
  for (const fs::path& dir : checkpointFolders(root)) {
    if (!fs::exists(dir / checkpoint::kManifestFile)) continue;  // incomplete, not broken
    try {
      Checkpoint c = readChecked(dir);
      if (!best || recency(c.manifest) > recency(best->manifest)) best = std::move(c);
    } catch (const Error& e) {
      std::cerr << "skipping " << e.what() << "\n";
    }
  }
  return best;
}

}  // namespace

Checkpoint findCheckpoint(const std::string& path, const std::string& given_as) {
  const fs::path root(path);
  if (fs::exists(root / checkpoint::kManifestFile)) return readChecked(root);
  if (!fs::is_directory(root)) throw Error(given_as + " " + path + ": no such checkpoint folder");
  std::optional<Checkpoint> best = newestIntact(root);
  if (!best) throw Error(given_as + " " + path + ": no intact checkpoint in this folder");
  return *best;
}

std::optional<Checkpoint> checkpointToResume(const std::string& resume, const std::string& checkpoint_dir) {
  if (resume.empty()) return std::nullopt;
  const fs::path root(resume);
  const bool own_folder = !checkpoint_dir.empty() && fs::weakly_canonical(root) == fs::weakly_canonical(checkpoint_dir);
  if (own_folder && !fs::exists(root / checkpoint::kManifestFile)) {
    if (!fs::exists(root)) return std::nullopt;
    return newestIntact(root);
  }
  return findCheckpoint(resume, "--resume");
}

void checkEpochsLeft(const Checkpoint& from, int epochs) {
  if (from.manifest.position.epoch >= epochs)
    throw Error("checkpoint " + from.dir + " ends epoch " + std::to_string(from.manifest.position.epoch) +
                ": --epochs " + std::to_string(epochs) + " leaves nothing to train (raise --epochs)");
}

std::string saveCheckpoint(const std::string& root, int64_t run, int keep, const checkpoint::Position& position,
                           const checkpoint::Identity& identity, const plan::Plan& plan, const RankState& state,
                           Coordinator& t) {
  const fs::path dir = fs::path(root) / folderName(position.minibatches, run);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("--checkpoint-dir " + root + ": cannot create " + dir.string() + " (" + ec.message() + ")");
  const std::vector<char> bytes = torch::pickle_save(shardOf(state, t.rank()));
  text::writeFileAtomically((dir / fileOfRank(t.rank())).string(), std::string(bytes.begin(), bytes.end()));

  // Every rank's file is in place once this sum is; rank 0 learns their sizes and sums.
  torch::Tensor files = torch::zeros({t.worldSize(), 2}, torch::kLong);
  files[t.rank()][0] = static_cast<int64_t>(bytes.size());
  files[t.rank()][1] = static_cast<int64_t>(checkpoint::crc32(bytes.data(), bytes.size()));
  std::vector<torch::Tensor> reduced{files};
  t.allReduceSum(reduced, t.allRanks());
  if (t.rank() == 0) {
    Manifest m;
    m.position = position;
    m.identity = identity;
    m.plan = plan;
    m.world_size = t.worldSize();
    m.written_at = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    for (int r = 0; r < t.worldSize(); ++r)
      m.files.push_back({fileOfRank(r), reduced[0][r][0].item<int64_t>(),
                         static_cast<uint32_t>(reduced[0][r][1].item<int64_t>())});
    m.layers = layerEntries(state);
    json_io::writeFile((dir / checkpoint::kManifestFile).string(), m.toJson());
    prune(fs::path(root), dir, keep);
  }
  return dir.string();
}

void loadCheckpoint(const Checkpoint& c, const checkpoint::Identity& identity, const plan::Plan& plan,
                    const RankState& state) {
  const Manifest& m = c.manifest;
  const std::string difference = m.identity.differenceFrom(identity);
  if (!difference.empty()) throw Error("checkpoint " + c.dir + " does not match this run: " + difference);
  // Only the files holding this rank's layers are read.
  Shards shards(c);
  torch::NoGradGuard no_grad;
  for (int stage : state.executor.stagesOfRank()) {
    std::vector<PipelineExecutor::TensorMap> states;
    int64_t steps = -1;
    for (int l : state.stages[stage].layers) {
      const std::string& layer = state.model.layers[l].name;
      const checkpoint::LayerEntry* entry = m.layer(layer);
      if (!entry)
        throw Error("checkpoint " + c.dir + " is of another model: it has no layer '" + layer + "' (" +
                    std::to_string(m.layers.size()) + " layers, of " + m.identity.model + ")");
      const auto& module = *state.model.layers[l].module.ptr();
      auto load = [&](const std::string& name, torch::Tensor target) {
        const torch::Tensor saved = shards.tensor(entry->file, tensorKey(layer, name));
        if (saved.sizes() != target.sizes())
          throw Error("checkpoint " + c.dir + " is of another model: " + tensorKey(layer, name) + " has shape " +
                      c10::str(saved.sizes()) + " there, " + c10::str(target.sizes()) + " here");
        target.copy_(saved);
      };
      for (const auto& p : module.named_parameters()) {
        load(p.key(), p.value().detach());
        PipelineExecutor::TensorMap fields;
        const std::string prefix = tensorKey(layer, p.key()) + "#";
        for (const auto& item : shards.file(entry->file))
          if (item.key().rfind(prefix, 0) == 0) fields[item.key().substr(prefix.size())] = item.value();
        states.push_back(std::move(fields));
      }
      for (const auto& b : module.named_buffers()) load(b.key(), b.value().detach());
      const int64_t layer_steps = shards.tensor(entry->file, stepsKey(layer)).item<int64_t>();
      // A stage made of layers that stepped apart (another plan's stages): T1 ramps from the fewest.
      steps = steps < 0 ? layer_steps : std::min(steps, layer_steps);
    }
    try {
      state.executor.loadParameterState(stage, states);
    } catch (const Error& e) {
      throw Error("checkpoint " + c.dir + ": " + e.what());
    }
    state.executor.setStepsTaken(stage, std::max<int64_t>(steps, 0));
  }
  // The random stream continues only where the same ranks run the same stages.
  const int rank = state.rank;
  if (m.plan.toJson() == plan.toJson() && rank < m.world_size) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle to the global one
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(shards.tensor(fileOfRank(rank), kRngKey));
  }
}

namespace {

// What torch.save writes for a dict of tensors, in the form torch.load reads by default
// (weights_only, since PyTorch 2.6): torch::pickle_save tags the dict with its element
// types, a global that weights_only refuses, so the pickle is written here untagged.
std::string weightsOnlyPickle(const c10::Dict<std::string, torch::Tensor>& dict) {
  std::vector<char> pickled;
  torch::jit::Pickler pickler([&](const char* bytes, size_t n) { pickled.insert(pickled.end(), bytes, bytes + n); },
                              nullptr, nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(dict);
  pickler.stop();
  std::string archive;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* bytes, size_t n) {
    archive.append(static_cast<const char*>(bytes), n);
    return n;
  });
  torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  return archive;
}

}  // namespace

void exportCheckpoint(const Checkpoint& c, const std::string& out, const std::string& model_file) {
  const Manifest& m = c.manifest;
  Shards shards(c);
  // Every layer's tensors, as "<layer>.<name>": the module attribute path in both forms.
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& layer : m.layers)
    for (const auto& t : layer.tensors)
      tensors.push_back({layer.name + "." + t.name, shards.tensor(layer.file, tensorKey(layer.name, t.name))});
  const std::string script = model_file.empty() ? m.identity.model_file : model_file;
  if (script.empty()) {
    c10::Dict<std::string, torch::Tensor> dict;
    for (const auto& [name, tensor] : tensors) dict.insert(name, tensor);
    text::writeFileAtomically(out, weightsOnlyPickle(dict));
    return;
  }
  torch::jit::Module module;
  try {
    module = torch::jit::load(script);
  } catch (const c10::Error& e) {
    throw Error(script + ": cannot load the model the checkpoint was trained from (" + e.what_without_backtrace() +
                "); name it with --model-file");
  }
  // The module's tensors by the names the checkpoint gives them: layer, then the name
  // inside it ("wide.0.weight" is layer "wide"'s "0_weight").
  std::map<std::string, torch::Tensor> targets;
  auto target = [&](const std::string& path, const torch::Tensor& tensor) {
    const std::size_t dot = path.find('.');
    targets[dot == std::string::npos ? path
                                     : path.substr(0, dot + 1) + models::scriptedTensorName(path.substr(dot + 1))] =
        tensor;
  };
  for (const auto& p : module.named_parameters()) target(p.name, p.value);
  for (const auto& b : module.named_buffers()) target(b.name, b.value);
  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : tensors) {
    auto it = targets.find(name);
    if (it == targets.end() || it->second.sizes() != tensor.sizes())
      throw Error(script + " is not the model checkpoint " + c.dir + " was taken of: '" + name + "' " +
                  (it == targets.end() ? "is missing" : "has another shape"));
    it->second.copy_(tensor);
  }
  std::ostringstream bytes;
  module.save(bytes);
  text::writeFileAtomically(out, bytes.str());
}

}  // namespace pipetrain::runtime
