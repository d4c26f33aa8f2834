#include "pipetrain/checkpoint/manifest.h"

#include <array>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

#include "pipetrain/util/limits.h"

namespace pipetrain::checkpoint {
namespace {

using json_io::Json;
using json_io::JsonCursor;

constexpr const char* kFormat = "pipetrain.checkpoint";
constexpr int kVersion = 1;

Json identityJson(const Identity& i) {
  return {{"model", i.model},     {"model_file", i.model_file},
          {"optimizer", i.optimizer}, {"samples_per_minibatch", i.samples_per_minibatch},
          {"seed", std::to_string(i.seed)},       {"data", i.data}};
}

Identity identityFrom(const JsonCursor& c) {
  c.allowOnly({"model", "model_file", "optimizer", "samples_per_minibatch", "seed", "data"});
  Identity i;
  i.model = c.field("model").asString();
  i.model_file = c.field("model_file").asString();
  i.optimizer = c.field("optimizer").asString();
  i.samples_per_minibatch = c.field("samples_per_minibatch").asIntIn(1, std::numeric_limits<int64_t>::max());
  // A string: a 64-bit seed does not survive JSON's numbers everywhere.
  const std::string seed = c.field("seed").asString();
  std::size_t used = 0;
  try {
    i.seed = std::stoull(seed, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != seed.size() || seed[0] == '-') c.field("seed").fail("expected a seed, found '" + seed + "'");
  i.data = c.field("data").asString();
  return i;
}

std::array<uint32_t, 256> crcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t n = 0; n < 256; ++n) {
    uint32_t c = n;
    for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[n] = c;
  }
  return table;
}

}  // namespace

std::string Identity::differenceFrom(const Identity& r) const {
  auto differs = [](const std::string& what, const auto& mine, const auto& theirs) -> std::string {
    if (mine == theirs) return "";
    std::ostringstream s;
    s << what << " (checkpoint " << mine << ", this run " << theirs << ")";
    return s.str();
  };
  for (const std::string& d :
       {differs("the model", model, r.model), differs("the optimizer", optimizer, r.optimizer),
        differs("samples per mini-batch", samples_per_minibatch, r.samples_per_minibatch),
        differs("the seed (it orders the data)", seed, r.seed), differs("the data", data, r.data)})
    if (!d.empty()) return d;
  return "";
}

Json Manifest::toJson() const {
  Json j = json_io::header(kFormat, kVersion);
  j["position"] = {{"epoch", position.epoch}, {"step", position.step}, {"minibatches", position.minibatches}};
  j["identity"] = identityJson(identity);
  j["plan"] = plan.toJson();
  j["world_size"] = world_size;
  j["written_at"] = written_at;
  j["files"] = Json::array();
  for (const auto& f : files) j["files"].push_back({{"name", f.name}, {"bytes", f.bytes}, {"crc32", f.crc32}});
  j["layers"] = Json::array();
  for (const auto& l : layers) {
    Json tensors = Json::array();
    for (const auto& t : l.tensors) tensors.push_back({{"name", t.name}, {"shape", t.shape}});
    j["layers"].push_back({{"name", l.name}, {"file", l.file}, {"tensors", tensors}});
  }
  return j;
}

Manifest Manifest::fromJson(const Json& j, const std::string& origin) {
  const JsonCursor root(j, origin);
  json_io::checkHeader(root, kFormat, kVersion);
  root.allowOnly({"format", "version", "position", "identity", "plan", "world_size", "written_at", "files", "layers"});
  Manifest m;
  const JsonCursor p = root.field("position");
  p.allowOnly({"epoch", "step", "minibatches"});
  m.position.epoch = static_cast<int>(p.field("epoch").asIntIn(0, std::numeric_limits<int>::max()));
  m.position.step = p.field("step").asNonNegativeInt();
  m.position.minibatches = p.field("minibatches").asNonNegativeInt();
  m.identity = identityFrom(root.field("identity"));
  m.plan = plan::Plan::fromJson(root.field("plan").node(), origin + ": plan");
  m.world_size = static_cast<int>(root.field("world_size").asIntIn(1, limits::kMaxDevices));
  m.written_at = root.field("written_at").asNumberIn(0, 1e12);
  for (const JsonCursor& f : root.field("files").asArray()) {
    f.allowOnly({"name", "bytes", "crc32"});
    FileEntry e{f.field("name").asString(), f.field("bytes").asBytes(),
                static_cast<uint32_t>(f.field("crc32").asIntIn(0, std::numeric_limits<uint32_t>::max()))};
    if (e.name.empty() || e.name.find('/') != std::string::npos || e.name[0] == '.')
      f.field("name").fail("a file of the checkpoint's own folder, not '" + e.name + "'");
    m.files.push_back(std::move(e));
  }
  const auto layers = root.field("layers").asArray();
  if (layers.size() > static_cast<std::size_t>(limits::kMaxLayers))
    root.field("layers").fail("more than " + std::to_string(limits::kMaxLayers) + " layers");
  for (const JsonCursor& l : layers) {
    l.allowOnly({"name", "file", "tensors"});
    LayerEntry e{l.field("name").asString(), l.field("file").asString(), {}};
    if (!m.file(e.file)) l.field("file").fail("'" + e.file + "' is not one of the checkpoint's files");
    if (m.layer(e.name)) l.field("name").fail("layer '" + e.name + "' appears twice");
    for (const JsonCursor& t : l.field("tensors").asArray()) {
      t.allowOnly({"name", "shape"});
      TensorEntry te{t.field("name").asString(), {}};
      for (const JsonCursor& d : t.field("shape").asArray()) te.shape.push_back(d.asIntIn(0, int64_t{1} << 40));
      e.tensors.push_back(std::move(te));
    }
    m.layers.push_back(std::move(e));
  }
  return m;
}

Manifest Manifest::load(const std::string& path) { return fromJson(json_io::readFile(path), path); }

const LayerEntry* Manifest::layer(const std::string& name) const {
  for (const auto& l : layers)
    if (l.name == name) return &l;
  return nullptr;
}

const FileEntry* Manifest::file(const std::string& name) const {
  for (const auto& f : files)
    if (f.name == name) return &f;
  return nullptr;
}

uint32_t crc32(const char* data, std::size_t size) {
  static const std::array<uint32_t, 256> table = crcTable();
  uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < size; ++i) c = table[(c ^ static_cast<unsigned char>(data[i])) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::string checkFiles(const Manifest& manifest, const std::string& dir) {
  for (const FileEntry& f : manifest.files) {
    std::ifstream in(dir + "/" + f.name, std::ios::binary);
    if (!in) return f.name + ": missing";
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (static_cast<int64_t>(bytes.size()) != f.bytes)
      return f.name + ": " + (static_cast<int64_t>(bytes.size()) < f.bytes ? "truncated" : "longer than written") +
             ", " + std::to_string(bytes.size()) + " of " + std::to_string(f.bytes) + " bytes";
    if (crc32(bytes.data(), bytes.size()) != f.crc32) return f.name + ": corrupted (its CRC-32 does not match the manifest's)";
  }
  return "";
}

}  // namespace pipetrain::checkpoint
