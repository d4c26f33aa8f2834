// The user's own tensors, from a torch.save file (the zip archive Python writes by
// default since 1.6), read with LibTorch's unpickler straight from the file's pages.
//
// Why mapped, not read: reading the README's GPT-2 file of tokens (the bytes, the
// unpickled tensors, the held-out split's copies) grew every rank's heap by many times
// its model's tensors, which glibc kept (util::retainFreedMemory); and every rank read it,
// the middle stages only for its shape (measured: docs/byo.md, "The data: a torch.save
// file"). Mapped, a tensor of the file is a view of the page cache, one copy shared by
// every rank on the host, and the held-out split is a rule over rows, not a copy.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/unpickler.h>
#include <torch/serialize.h>

#include "pipetrain/util/error.h"
#include "pipetrain/util/text.h"
#include "readers.h"

namespace pipetrain::data {
namespace {

// Every tenth sample (indices 9, 19, ...) is held out when the file has no test split:
// spread over the file, so data sorted by class still tests every class.
constexpr int64_t kHoldOutEvery = 10;

// Which of a tensor's rows a split serves.
enum class Rows {
  kAll,
  kKept,     // all but every tenth (the training split of a file without a test split)
  kHeldOut,  // every tenth: rows 9, 19, ...
};

struct Split {
  std::vector<torch::Tensor> inputs;  // "inputs", or each named input (TensorFile::names)
  torch::Tensor labels;               // every row of the file's tensors
  Rows rows = Rows::kAll;
  int64_t size() const {
    const int64_t n = labels.size(0), held = n / kHoldOutEvery;
    return rows == Rows::kAll ? n : rows == Rows::kKept ? n - held : held;
  }
  // The row of the file that sample `i` of the split is.
  int64_t row(int64_t i) const {
    if (rows == Rows::kKept) return i / (kHoldOutEvery - 1) * kHoldOutEvery + i % (kHoldOutEvery - 1);
    if (rows == Rows::kHeldOut) return i * kHoldOutEvery + kHoldOutEvery - 1;
    return i;
  }
};

class FileError {
 public:
  explicit FileError(std::string path) : path_(std::move(path)) {}
  [[noreturn]] void operator()(const std::string& what) const { throw Error("data file '" + path_ + "': " + what); }

 private:
  std::string path_;
};

// The file mapped copy-on-write: what reads it shares the page cache, what writes gets
// pages of its own. Unmapped when the last tensor viewing it is freed. As with
// torch.load(mmap=True), the file must not be rewritten in place while a run reads it
// (a truncated page faults): write a new file and rename it over the old (docs/byo.md).
class Mapping {
 public:
  static std::shared_ptr<Mapping> open(const std::string& path, const FileError& fail) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(std::string("cannot open it: ") + std::strerror(errno));
    struct stat st {};
    const bool stated = ::fstat(fd, &st) == 0;
    if (!stated || st.st_size <= 0) {
      const std::string why = stated ? "it is empty" : std::string("cannot stat it: ") + std::strerror(errno);
      ::close(fd);
      fail(why);
    }
    const auto size = static_cast<std::size_t>(st.st_size);
    void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    // A file system that cannot map files: read into pages of the process's own, which
    // are still returned to the kernel when the last tensor goes (not to glibc's heap).
    if (base == MAP_FAILED) {
      base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      std::size_t done = 0;
      while (base != MAP_FAILED && done < size) {
        const ssize_t n = ::pread(fd, static_cast<char*>(base) + done, size - done, static_cast<off_t>(done));
        if (n <= 0) {
          const int error = n < 0 ? errno : EIO;
          ::munmap(base, size);
          ::close(fd);
          fail(std::string("cannot read it: ") + std::strerror(error));
        }
        done += static_cast<std::size_t>(n);
      }
    }
    const int error = errno;
    ::close(fd);
    if (base == MAP_FAILED) fail(std::string("cannot map or read it: ") + std::strerror(error));
    return std::shared_ptr<Mapping>(new Mapping(static_cast<char*>(base), size));
  }
  ~Mapping() { ::munmap(base_, size_); }
  char* base() const { return base_; }
  std::size_t size() const { return size_; }
  // Reads every page in, so that a dataset's resident size is known when it opens (the
  // planner prices it from there), not grown into over the first epoch.
  void populate() const {
    volatile char sum = 0;
    const long page = ::sysconf(_SC_PAGESIZE);
    for (std::size_t at = 0; at < size_; at += static_cast<std::size_t>(page)) sum = sum + base_[at];
  }

 private:
  Mapping(char* base, std::size_t size) : base_(base), size_(size) {}
  char* base_;
  std::size_t size_;
};

// One mapping per file in the process while any of it is in use: a rank's training and
// test splits share their pages instead of each mapping (and counting) them. Keyed by the
// file as it is now (device, inode, size, modification time), so that a file written
// anew under the same path is mapped anew.
std::shared_ptr<Mapping> mappingOf(const std::string& path, const FileError& fail) {
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<Mapping>> open;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(std::string("cannot open it: ") + std::strerror(errno));
  const std::string key = path + "|" + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" +
                          std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
                          std::to_string(st.st_mtim.tv_nsec);
  std::lock_guard<std::mutex> lock(mutex);
  // A file no dataset views any longer leaves its entry: dropped, so that a process that
  // opens many files (a test suite, a sweep over data files) does not keep one per file.
  for (auto it = open.begin(); it != open.end();) it = it->second.expired() ? open.erase(it) : std::next(it);
  if (auto mapped = open[key].lock()) return mapped;
  auto mapped = Mapping::open(path, fail);
  open[key] = mapped;
  return mapped;
}

struct TensorFile {
  std::vector<std::string> names;  // the named inputs, in the file's order; empty: "inputs"
  Split train, test;
  std::shared_ptr<Mapping> mapping;  // the file, which the tensors view
};

// The archive's directory and pickle read from the mapping: the same bytes the tensors
// view, whatever happens to the file after it was mapped. Reads past the end read nothing.
class MappingReader final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit MappingReader(std::shared_ptr<Mapping> file) : file_(std::move(file)) {}
  std::size_t size() const override { return file_->size(); }
  std::size_t read(uint64_t pos, void* buf, std::size_t n, const char* /*what*/) const override {
    if (pos >= file_->size()) return 0;
    n = std::min<std::size_t>(n, file_->size() - pos);
    std::memcpy(buf, file_->base() + pos, n);
    return n;
  }

 private:
  std::shared_ptr<Mapping> file_;
};

// torch.load's reading of the archive, with each tensor's storage a view of its record's
// bytes in the mapping. A record stored compressed (torch.save never compresses; a
// re-zipped file may) is copied out instead.
c10::IValue unpickleMapped(const std::shared_ptr<Mapping>& file, const FileError& fail) {
  caffe2::serialize::PyTorchStreamReader reader(std::make_shared<MappingReader>(file));
  const auto [pickle, pickle_size] = reader.getRecord("data.pkl");
  std::size_t read = 0;
  auto next = [&, data = static_cast<const char*>(pickle.get()), size = pickle_size](char* out, std::size_t n) {
    n = std::min(n, size - read);
    std::memcpy(out, data + read, n);
    read += n;
    return n;
  };
  std::map<const void*, std::size_t> record_bytes;  // each storage's record, by its data
  auto record = [&](const std::string& key) -> at::DataPtr {
    const std::string name = "data/" + key;
    const std::size_t header = reader.getRecordHeaderOffset(name), offset = reader.getRecordOffset(name);
    const std::size_t size = reader.getRecordSize(name);
    uint16_t method = 1;
    if (header + 10 <= file->size()) std::memcpy(&method, file->base() + header + 8, sizeof method);
    if (method != 0 || offset + size > file->size()) {
      at::DataPtr copied = std::get<0>(reader.getRecord(name));
      record_bytes[copied.get()] = size;
      return copied;
    }
    record_bytes[file->base() + offset] = size;
    // The DataPtr keeps the mapping alive for as long as the storage lives.
    auto* keep = new std::shared_ptr<Mapping>(file);
    return {file->base() + offset, keep, [](void* p) { delete static_cast<std::shared_ptr<Mapping>*>(p); },
            at::Device(at::kCPU)};
  };
  torch::jit::Unpickler unpickler(next, nullptr, nullptr, record, at::Device(at::kCPU));
  unpickler.set_version(reader.version());
  c10::IValue value = unpickler.parse_ivalue();
  // The pickle says how many bytes each storage has, the archive how many its record
  // holds: a storage longer than its record would read past it (the file's next record,
  // or past the end of the mapping).
  if (value.isGenericDict())
    for (const auto& entry : value.toGenericDict()) {
      if (!entry.value().isTensor()) continue;
      const c10::Storage& storage = entry.value().toTensor().storage();
      const auto it = record_bytes.find(storage.data());
      if (it != record_bytes.end() && storage.nbytes() > it->second)
        fail("'" + (entry.key().isString() ? entry.key().toStringRef() : std::string("?")) + "' claims " +
             std::to_string(storage.nbytes()) + " bytes, but its record in the archive holds " +
             std::to_string(it->second));
    }
  return value;
}

torch::Tensor tensorAt(const c10::Dict<c10::IValue, c10::IValue>& dict, const std::string& key, const FileError& fail) {
  const auto it = dict.find(key);
  if (it == dict.end()) return {};
  if (!it->value().isTensor()) fail("'" + key + "' is a " + it->value().tagKind() + ", not a tensor");
  return it->value().toTensor();
}

// Whether every value is finite, a slice at a time: isfinite's temporaries for the whole
// tensor took its size again, which the heap kept.
bool allFinite(const torch::Tensor& t) {
  constexpr int64_t kSlice = 1 << 16;
  const torch::Tensor flat = t.reshape({-1});
  for (int64_t at = 0; at < flat.numel(); at += kSlice)
    if (!torch::isfinite(flat.narrow(0, at, std::min(kSlice, flat.numel() - at))).all().item<bool>()) return false;
  return true;
}

// Inputs as fp32 or int64, labels as int64 (classes) or fp32 (targets), contiguous: the
// file's own tensors where they already are (no copy). `keys` name the inputs in the file;
// named inputs may be bool (a mask), read as int64, and travel packed as fp32, so their
// integers must lie in [0, 2^24).
Split normalise(const std::vector<torch::Tensor>& inputs, const std::vector<std::string>& keys, torch::Tensor labels,
                const std::string& label_key, bool named, const FileError& fail) {
  auto convert = [&](torch::Tensor t, const std::string& key) {
    if (t.is_floating_point()) {
      t = t.to(torch::kFloat).contiguous();
      if (!allFinite(t)) fail("'" + key + "' holds NaN or infinite values");
      return t;
    }
    if (t.is_complex() || (t.scalar_type() == torch::kBool && !named))
      fail("'" + key + "' has dtype " + c10::toString(t.scalar_type()) + "; use a float or integer dtype");
    return t.to(torch::kLong).contiguous();
  };
  Split s;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const torch::Tensor& x = inputs[k];
    if (x.dim() < 1 || x.size(0) == 0) fail("'" + keys[k] + "' holds no samples (its shape is " + c10::str(x.sizes()) + ")");
    if (labels.dim() < 1 || labels.size(0) != x.size(0))
      fail("'" + label_key + "' has shape " + c10::str(labels.sizes()) + "; it needs one row per sample of '" + keys[k] +
           "' " + c10::str(x.sizes()));
    s.inputs.push_back(convert(x, keys[k]));
    const torch::Tensor& in = s.inputs.back();
    if (named && !in.is_floating_point() &&
        (in.min().item<int64_t>() < 0 || in.max().item<int64_t>() >= models::kLargestPackedInteger))
      fail("'" + keys[k] + "' holds integers outside [0, 2^24), which named inputs cannot (they travel as fp32)");
  }
  s.labels = convert(labels, label_key);
  if (!s.labels.is_floating_point() && s.labels.min().item<int64_t>() < 0)
    fail("'" + label_key + "' has negative class labels");
  return s;
}

// The keys of a file's named inputs: where it has no "inputs", every key but the labels
// and the test split's ("test_..."), in the file's order.
std::vector<std::string> namedInputKeys(const c10::Dict<c10::IValue, c10::IValue>& dict) {
  std::vector<std::string> names;
  for (const auto& entry : dict) {
    const std::string key = entry.key().isString() ? entry.key().toStringRef() : "?";
    if (key == "inputs") return {};
    if (key != "labels" && key.rfind("test_", 0) != 0) names.push_back(key);
  }
  return names;
}

TensorFile readTensorFile(const std::string& path) {
  const FileError fail(path);
  TensorFile file;
  file.mapping = mappingOf(path, fail);
  c10::IValue value;
  try {
    value = unpickleMapped(file.mapping, fail);
  } catch (const c10::Error& e) {
    fail(std::string("not a file written by torch.save (") + e.what_without_backtrace() + ")");
  }
  if (!value.isGenericDict()) fail("it holds a " + value.tagKind() + "; torch.save a dict of tensors (see docs/data.md)");
  c10::Dict<c10::IValue, c10::IValue> dict = value.toGenericDict();
  file.names = namedInputKeys(dict);
  const bool named = !file.names.empty();
  std::vector<std::string> keys = named ? file.names : std::vector<std::string>{"inputs"}, test_keys;
  for (const std::string& key : keys) test_keys.push_back("test_" + key);
  for (const auto& entry : dict) {
    const std::string key = entry.key().isString() ? entry.key().toStringRef() : "?";
    const bool known = key == "labels" || key == "test_labels" ||
                       std::count(keys.begin(), keys.end(), key) || std::count(test_keys.begin(), test_keys.end(), key);
    if (known) continue;
    if (!named)
      fail("unexpected key '" + key + "'; the keys are inputs, labels and optionally test_inputs, test_labels "
           "(or inputs by name, without 'inputs': docs/data.md)");
    fail("'" + key + "' is a test split of no input (the inputs are " + text::joined(keys) + ")");
  }
  if (!dict.contains(std::string("labels")))
    fail(named ? "it needs the key 'labels' beside the inputs" : "it needs the keys 'inputs' and 'labels'");
  auto tensors = [&](const std::vector<std::string>& ks) {
    std::vector<torch::Tensor> out;
    for (const std::string& k : ks) out.push_back(tensorAt(dict, k, fail));
    return out;
  };
  const std::vector<torch::Tensor> x = tensors(keys), tx = tensors(test_keys);
  if (!x.front().defined()) fail("it needs the keys 'inputs' and 'labels', or inputs by name beside 'labels'");
  const torch::Tensor y = tensorAt(dict, "labels", fail), ty = tensorAt(dict, "test_labels", fail);
  const bool tested = ty.defined();
  for (std::size_t k = 0; k < tx.size(); ++k)
    if (tx[k].defined() != tested)
      fail("give both '" + test_keys[k] + "' and 'test_labels', or neither (a test split has every input)");
  file.train = normalise(x, keys, y, "labels", named, fail);
  if (tested) {
    file.test = normalise(tx, test_keys, ty, "test_labels", named, fail);
  } else {
    const int64_t n = file.train.size();
    if (n < kHoldOutEvery) fail("it has " + std::to_string(n) + " samples, too few to hold out every tenth for tests");
    file.test = file.train;
    file.train.rows = Rows::kKept;
    file.test.rows = Rows::kHeldOut;
  }
  auto same = [&](const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
    if (a.sizes().slice(1) != b.sizes().slice(1) || a.scalar_type() != b.scalar_type())
      fail("'test_" + what + "' " + c10::str(b.sizes()) + " " + c10::toString(b.scalar_type()) + " does not match '" +
           what + "' " + c10::str(a.sizes()) + " " + c10::toString(a.scalar_type()) + " past the first dimension");
  };
  for (std::size_t k = 0; k < keys.size(); ++k) same(file.train.inputs[k], file.test.inputs[k], keys[k]);
  same(file.train.labels, file.test.labels, "labels");
  return file;
}

// The kind an input is, by its dtype and shape, with the labels it comes with.
models::InputKind kindOf(const torch::Tensor& inputs, const torch::Tensor& labels) {
  if (!inputs.is_floating_point()) return labels.dim() == 2 ? models::InputKind::kTokens : models::InputKind::kIndices;
  return inputs.dim() > 2 ? models::InputKind::kImage : models::InputKind::kFeatures;
}

models::InputSpec specOf(const TensorFile& file) {
  models::InputSpec spec;
  const torch::Tensor& first = file.train.inputs.front();
  spec.sample_shape = first.sizes().slice(1).vec();
  spec.kind = kindOf(first, file.train.labels);
  if (spec.kind == models::InputKind::kTokens && file.train.labels.size(1) != first.size(1))
    spec.label_positions = file.train.labels.size(1);
  const bool one_tensor = file.test.labels.is_same(file.train.labels);  // the splits are rules over the same rows
  auto largest = [&](const torch::Tensor& train, const torch::Tensor& test) {
    int64_t most = train.max().item<int64_t>();
    return one_tensor ? most : std::max(most, test.max().item<int64_t>());
  };
  for (std::size_t k = 0; k < file.names.size(); ++k) {
    const torch::Tensor& x = file.train.inputs[k];
    models::NamedInput part{file.names[k], x.sizes().slice(1).vec(), !x.is_floating_point(), 0};
    if (part.integer) part.range = largest(x, file.test.inputs[k]) + 1;
    spec.named.push_back(std::move(part));
  }
  if (file.train.labels.is_floating_point()) {
    spec.loss = models::LossKind::kMeanSquaredError;
    spec.num_classes = c10::multiply_integers(file.train.labels.sizes().slice(1));
  } else {
    // Over every row of the file: both splits' labels, whatever rows each serves.
    spec.num_classes = largest(file.train.labels, file.test.labels) + 1;
  }
  return spec;
}

// Whether two files serve the same inputs (shapes, kinds, names), whatever their classes
// and integer ranges.
bool sameInputs(const models::InputSpec& a, const models::InputSpec& b) {
  if (a.sample_shape != b.sample_shape || a.kind != b.kind || a.loss != b.loss || a.named.size() != b.named.size() ||
      a.label_positions != b.label_positions)
    return false;
  for (std::size_t k = 0; k < a.named.size(); ++k)
    if (a.named[k].name != b.named[k].name || a.named[k].sample_shape != b.named[k].sample_shape ||
        a.named[k].integer != b.named[k].integer)
      return false;
  return true;
}

class TensorDataset : public Dataset {
 public:
  TensorDataset(Split split, std::string path, models::InputSpec input)
      : split_(std::move(split)), path_(std::move(path)), input_(std::move(input)) {}
  int64_t size() const override { return split_.size(); }
  Batch get(const std::vector<int64_t>& indices) const override {
    const torch::Tensor rows = rowsOf(indices);
    std::vector<torch::Tensor> inputs;
    for (const torch::Tensor& x : split_.inputs) inputs.push_back(x.index_select(0, rows));
    return {input_.named.empty() ? inputs.front() : models::packInputs(input_, inputs),
            split_.labels.index_select(0, rows)};
  }
  torch::Tensor labels(const std::vector<int64_t>& indices) const override {
    return split_.labels.index_select(0, rowsOf(indices));
  }

 private:
  torch::Tensor rowsOf(const std::vector<int64_t>& indices) const {
    checkIndices(indices, size(), path_.c_str());
    std::vector<int64_t> rows;
    rows.reserve(indices.size());
    for (const int64_t i : indices) rows.push_back(split_.row(i));
    return torch::tensor(rows, torch::kLong);
  }
  Split split_;
  std::string path_;
  models::InputSpec input_;
};

}  // namespace

models::InputSpec inputSpecOfFile(const std::string& path) {
  const std::vector<std::string> shards = shardsOf(path);
  if (shards.empty()) return specOf(readTensorFile(path));
  // Every shard serves the first's input; the classes are all of theirs.
  models::InputSpec spec = specOf(readTensorFile(shards.front()));
  for (std::size_t i = 1; i < shards.size(); ++i) {
    const models::InputSpec shard = specOf(readTensorFile(shards[i]));
    if (!sameInputs(shard, spec))
      throw Error("data file '" + shards[i] + "' serves " + describeInput(shard) + ", but '" + shards.front() +
                  "' serves " + describeInput(spec));
    if (spec.loss == models::LossKind::kCrossEntropy) spec.num_classes = std::max(spec.num_classes, shard.num_classes);
    for (std::size_t k = 0; k < spec.named.size(); ++k)
      spec.named[k].range = std::max(spec.named[k].range, shard.named[k].range);
  }
  return spec;
}

int64_t tensorFileSamples(const DataOptions& options) {
  TensorFile file = readTensorFile(options.file);
  return options.split == "train" ? file.train.size() : file.test.size();
}

std::unique_ptr<Dataset> openTensorFile(const DataOptions& options, const models::InputSpec& input) {
  TensorFile file = readTensorFile(options.file);
  const models::InputSpec served = specOf(file);
  bool fits = sameInputs(served, input) && served.num_classes <= input.num_classes;
  for (std::size_t k = 0; fits && k < served.named.size(); ++k) fits = served.named[k].range <= input.named[k].range;
  if (!fits)
    throw Error("data file '" + options.file + "' serves " + describeInput(served) + ", but the model takes " +
                describeInput(input));
  file.mapping->populate();
  return std::make_unique<TensorDataset>(options.split == "train" ? std::move(file.train) : std::move(file.test),
                                         options.file, input);
}

}  // namespace pipetrain::data
