// The user's own tensors, from a torch.save file (the zip archive Python writes by
// default since 1.6), read with LibTorch's unpickler.
#include <fstream>

#include <torch/serialize.h>

#include "pipetrain/util/error.h"
#include "readers.h"

namespace pipetrain::data {
namespace {

// Every tenth sample (indices 9, 19, ...) is held out when the file has no test split:
// spread over the file, so data sorted by class still tests every class.
constexpr int64_t kHoldOutEvery = 10;

struct Split {
  torch::Tensor inputs, labels;
};

struct TensorFile {
  Split train, test;
};

class FileError {
 public:
  explicit FileError(std::string path) : path_(std::move(path)) {}
  [[noreturn]] void operator()(const std::string& what) const { throw Error("data file '" + path_ + "': " + what); }

 private:
  std::string path_;
};

torch::Tensor tensorAt(const c10::Dict<c10::IValue, c10::IValue>& dict, const std::string& key, const FileError& fail) {
  const auto it = dict.find(key);
  if (it == dict.end()) return {};
  if (!it->value().isTensor()) fail("'" + key + "' is a " + it->value().tagKind() + ", not a tensor");
  return it->value().toTensor();
}

// Inputs as fp32 or int64, labels as int64 (classes) or fp32 (targets); contiguous, so
// index_select copies rows.
Split normalise(torch::Tensor inputs, torch::Tensor labels, const std::string& prefix, const FileError& fail) {
  const std::string in_key = prefix + "inputs", label_key = prefix + "labels";
  if (inputs.dim() < 1 || inputs.size(0) == 0) fail("'" + in_key + "' holds no samples (its shape is " + c10::str(inputs.sizes()) + ")");
  if (labels.dim() < 1 || labels.size(0) != inputs.size(0))
    fail("'" + label_key + "' has shape " + c10::str(labels.sizes()) + "; it needs one row per sample of '" + in_key +
         "' " + c10::str(inputs.sizes()));
  auto convert = [&](torch::Tensor t, const std::string& key) {
    if (t.is_floating_point()) {
      t = t.to(torch::kFloat).contiguous();
      if (!torch::isfinite(t).all().item<bool>()) fail("'" + key + "' holds NaN or infinite values");
      return t;
    }
    if (t.is_complex() || t.scalar_type() == torch::kBool) fail("'" + key + "' has dtype " + c10::toString(t.scalar_type()) + "; use a float or integer dtype");
    return t.to(torch::kLong).contiguous();
  };
  Split s{convert(inputs, in_key), convert(labels, label_key)};
  if (!s.labels.is_floating_point() && s.labels.min().item<int64_t>() < 0)
    fail("'" + label_key + "' has negative class labels");
  return s;
}

TensorFile readTensorFile(const std::string& path) {
  const FileError fail(path);
  // One read of the whole file: an istreambuf_iterator copy took ~1 s per 100 MB.
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail("cannot open it");
  std::vector<char> bytes(static_cast<std::size_t>(in.tellg()));
  in.seekg(0);
  if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) fail("cannot read it");
  c10::IValue value;
  try {
    value = torch::pickle_load(bytes);
  } catch (const c10::Error& e) {
    fail(std::string("not a file written by torch.save (") + e.what_without_backtrace() + ")");
  }
  if (!value.isGenericDict()) fail("it holds a " + value.tagKind() + "; torch.save a dict of tensors (see docs/data.md)");
  c10::Dict<c10::IValue, c10::IValue> dict = value.toGenericDict();
  for (const auto& entry : dict) {
    const std::string key = entry.key().isString() ? entry.key().toStringRef() : "?";
    if (key != "inputs" && key != "labels" && key != "test_inputs" && key != "test_labels")
      fail("unexpected key '" + key + "'; the keys are inputs, labels and optionally test_inputs, test_labels");
  }
  const torch::Tensor x = tensorAt(dict, "inputs", fail), y = tensorAt(dict, "labels", fail);
  if (!x.defined() || !y.defined()) fail("it needs the keys 'inputs' and 'labels'");
  const torch::Tensor tx = tensorAt(dict, "test_inputs", fail), ty = tensorAt(dict, "test_labels", fail);
  if (tx.defined() != ty.defined()) fail("give both 'test_inputs' and 'test_labels', or neither");
  TensorFile file;
  if (tx.defined()) {
    file.train = normalise(x, y, "", fail);
    file.test = normalise(tx, ty, "test_", fail);
  } else {
    const Split all = normalise(x, y, "", fail);
    const int64_t n = all.inputs.size(0);
    if (n < kHoldOutEvery) fail("it has " + std::to_string(n) + " samples, too few to hold out every tenth for tests");
    const torch::Tensor index = torch::arange(n);
    const torch::Tensor held = index.remainder(kHoldOutEvery).eq(kHoldOutEvery - 1);
    const torch::Tensor test_rows = index.masked_select(held), train_rows = index.masked_select(held.logical_not());
    file.train = {all.inputs.index_select(0, train_rows), all.labels.index_select(0, train_rows)};
    file.test = {all.inputs.index_select(0, test_rows), all.labels.index_select(0, test_rows)};
  }
  auto same = [&](const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
    if (a.sizes().slice(1) != b.sizes().slice(1) || a.scalar_type() != b.scalar_type())
      fail("'test_" + what + "' " + c10::str(b.sizes()) + " " + c10::toString(b.scalar_type()) + " does not match '" +
           what + "' " + c10::str(a.sizes()) + " " + c10::toString(a.scalar_type()) + " past the first dimension");
  };
  same(file.train.inputs, file.test.inputs, "inputs");
  same(file.train.labels, file.test.labels, "labels");
  return file;
}

models::InputSpec specOf(const TensorFile& file) {
  models::InputSpec spec;
  const auto sample = file.train.inputs.sizes().slice(1);
  spec.sample_shape = sample.vec();
  if (!file.train.inputs.is_floating_point())
    spec.kind = file.train.labels.dim() == 2 ? models::InputKind::kTokens : models::InputKind::kIndices;
  else
    spec.kind = sample.size() > 1 ? models::InputKind::kImage : models::InputKind::kFeatures;
  if (file.train.labels.is_floating_point()) {
    spec.loss = models::LossKind::kMeanSquaredError;
    spec.num_classes = c10::multiply_integers(file.train.labels.sizes().slice(1));
  } else {
    spec.num_classes = std::max(file.train.labels.max().item<int64_t>(), file.test.labels.max().item<int64_t>()) + 1;
  }
  return spec;
}

class TensorDataset : public Dataset {
 public:
  TensorDataset(Split split, std::string path) : split_(std::move(split)), path_(std::move(path)) {}
  int64_t size() const override { return split_.inputs.size(0); }
  Batch get(const std::vector<int64_t>& indices) const override {
    const torch::Tensor rows = rowsOf(indices);
    return {split_.inputs.index_select(0, rows), split_.labels.index_select(0, rows)};
  }
  torch::Tensor labels(const std::vector<int64_t>& indices) const override {
    return split_.labels.index_select(0, rowsOf(indices));
  }

 private:
  torch::Tensor rowsOf(const std::vector<int64_t>& indices) const {
    checkIndices(indices, size(), path_.c_str());
    return torch::tensor(indices, torch::kLong);
  }
  Split split_;
  std::string path_;
};

}  // namespace

models::InputSpec inputSpecOfFile(const std::string& path) { return specOf(readTensorFile(path)); }

std::unique_ptr<Dataset> openTensorFile(const DataOptions& options, const models::InputSpec& input) {
  TensorFile file = readTensorFile(options.file);
  const models::InputSpec served = specOf(file);
  if (served.sample_shape != input.sample_shape || served.kind != input.kind || served.loss != input.loss ||
      served.num_classes > input.num_classes)
    throw Error("data file '" + options.file + "' serves " + describeInput(served) + ", but the model takes " +
                describeInput(input));
  return std::make_unique<TensorDataset>(options.split == "train" ? std::move(file.train) : std::move(file.test),
                                         options.file);
}

}  // namespace pipetrain::data
