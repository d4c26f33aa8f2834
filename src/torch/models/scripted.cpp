// The user's own model, from a TorchScript file: its top-level children become the
// layers. A chain passes each child's output to the next child. A DAG (declared by
// `pipetrain_inputs`) runs as the same chain of layers (scripted_layer.h), as the zoo's
// models do. This file reads the file, its wiring and its inputs' names, and checks them.
#include <torch/csrc/jit/python/update_graph_executor_opt.h>
#include <torch/script.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "pipetrain/util/error.h"
#include "pipetrain/util/text.h"
#include "scripted_layer.h"
#include "zoo.h"

namespace pipetrain::models {
namespace {

using scripted::lastLine;
using scripted::Wiring;

constexpr const char* kInputName = "input";
// What to do about a model written the usual way (work in forward() between children,
// ModuleList loops): let the capture tool cut it.
constexpr const char* kCaptureHint =
    "; a model written the usual way trains as it is once python/pipetrain_capture.py has cut it into layers "
    "(docs/byo.md, 'Your model as written')";
constexpr const char* kInputsAttribute = "pipetrain_inputs";
constexpr const char* kInputNamesAttribute = "pipetrain_input_names";

// Why torch::jit::load refused `path`, in a PyTorch user's words: what the file is, and
// how to write one that loads. torch.save writes zip archives too, with a data.pkl but
// no code/ folder (a pickled nn.Module or a state_dict); the zip's central directory,
// at its end, names every entry. `reason` is the loader's own message, without the
// C++ stack frames a c10::Error carries.
std::string notTorchScript(const std::string& path, const std::string& reason) {
  const std::string hint =
      "; save the model as TorchScript: torch.jit.script(model).save(PATH), or torch.jit.trace(model, example).save(PATH)";
  if (std::filesystem::path(path).extension() == ".py")
    return "not a TorchScript file but Python source: capture the model in it first, e.g. .venv/bin/python "
           "python/pipetrain_capture.py capture '" + path + ":MyModel()' --data-file DATA --out model.pt "
           "(docs/byo.md, 'Your model as written')";
  std::ifstream f(path, std::ios::binary);
  std::string head(4, '\0');
  f.read(head.data(), 4);
  if (head != std::string("PK\x03\x04", 4)) {
    const bool pickle = !head.empty() && static_cast<unsigned char>(head[0]) == 0x80;
    return std::string("not a TorchScript file: TorchScript files are zip archives, and this one is ") +
           (pickle ? "a Python pickle (torch.save's legacy format?)" : "not") + hint;
  }
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg(), tail = std::min<std::streamoff>(size, 4 << 20);
  std::string directory(static_cast<std::size_t>(tail), '\0');
  f.seekg(size - tail);
  f.read(directory.data(), tail);
  if (directory.find("data.pkl") != std::string::npos && directory.find("/code/") == std::string::npos)
    return "not a TorchScript file: written by torch.save (a pickled nn.Module or a state_dict), which keeps no "
           "code to run" + hint;
  return "not a TorchScript file saved by torch.jit.save or ScriptModule.save (" + reason + ")" + hint;
}

// torch::jit::load's refusal of `path`: a TorchScript file calling an operator LibTorch
// lacks (one registered in Python with torch.library when the file was written, such
// as transformers::grouped_mm_fallback), named; else notTorchScript's reasons.
std::string whyNotLoaded(const std::string& path, const std::string& message) {
  const std::string marker = "Unknown builtin op: ";
  const std::size_t at = message.find(marker);
  if (at == std::string::npos) return notTorchScript(path, lastLine(message));
  const std::size_t from = at + marker.size();
  const std::string op = message.substr(from, message.find_first_of(".\n", from) - from);
  return "a TorchScript file that calls the operator " + op + ", which LibTorch does not have: it was registered in "
         "Python (torch.library) where the file was written. Capture the model with python/pipetrain_capture.py, "
         "which decomposes such operators into ATen's or names the module that calls one it cannot";
}

std::string childKind(const torch::jit::Module& child) {
  const auto name = child.type()->name();
  return name ? name->name() : "module";
}

// Eval mode for the dry runs (no dropout, BatchNorm's running statistics untouched), and
// the module's own mode back on the way out, errors included.
class ScriptEvalScope {
 public:
  explicit ScriptEvalScope(torch::jit::Module& module) : module_(module), training_(module.is_training()) {
    module_.eval();
  }
  ~ScriptEvalScope() { module_.train(training_); }
  ScriptEvalScope(const ScriptEvalScope&) = delete;
  ScriptEvalScope& operator=(const ScriptEvalScope&) = delete;

 private:
  torch::jit::Module& module_;
  bool training_;
};

class Loader {
 public:
  Loader(std::string path, const InputSpec& input, const std::string& name)
      : path_(std::move(path)),
        shown_(name.empty() || name == std::filesystem::path(path_).stem().string()
                   ? "model file '" + path_ + "'"
                   : "model '" + name + "' (captured from Python as " + path_ + ")"),
        input_(input) {}

  Model load() {
    if (!std::filesystem::is_regular_file(path_)) fail("no such file");
    try {
      root_ = torch::jit::load(path_, torch::kCPU);
    } catch (const c10::Error& e) {
      fail(whyNotLoaded(path_, e.what_without_backtrace()));
    } catch (const std::exception& e) {
      fail(whyNotLoaded(path_, e.what()));
    }
    for (const auto& child : root_.named_children()) {
      names_.push_back(child.name);
      children_.push_back(child.value);
    }
    if (children_.empty()) fail("the module has no child modules, so nothing to place on stages");
    input_names_ = declaredInputNames();
    auto wiring = std::make_shared<Wiring>(wire());
    measure(*wiring);
    checkAgainstWhole();
    findInPlaceChildren(*wiring);

    Model model;
    model.name = std::filesystem::path(path_).stem().string();
    model.input = input_;
    model.tied = untie();
    for (int i = 0; i < wiring->layers(); ++i) {
      Layer layer{names_[i], childKind(children_[i]),
                  scripted::layer(names_[i], children_[i], wiring, i, modifies_input_[i])};
      if (wiring->readsInput(i)) {  // from the data, on whichever stage it runs
        layer.inputs = {names_[i - 1], kModelInput};
        layer.merge = Merge::kPack;
      }
      model.layers.push_back(std::move(layer));
    }
    model.script = std::make_shared<torch::jit::Module>(root_);
    return model;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw Error(shown_ + ": " + what); }

  // The model's inputs by name, in the file's order (forward()'s): `pipetrain_input_names`,
  // written by the capture where the data holds several; empty for one input. They must
  // be the data's names.
  std::vector<std::string> declaredInputNames() const {
    std::vector<std::string> names;
    if (root_.hasattr(kInputNamesAttribute)) {
      const c10::IValue attr = root_.attr(kInputNamesAttribute);
      if (!attr.isList()) fail(std::string(kInputNamesAttribute) + " must be a List[str]");
      for (const auto& name : attr.toListRef()) {
        if (!name.isString()) fail(std::string(kInputNamesAttribute) + " must be a List[str]");
        names.push_back(name.toStringRef());
      }
    }
    std::vector<std::string> data;
    for (const NamedInput& part : input_.named) data.push_back(part.name);
    const std::string takes = text::joined(names), holds = text::joined(data);
    if (names.empty() && !data.empty())
      fail("its forward() takes one input, and the data holds several by name (" + holds +
           "): save the one under 'inputs', or capture the model from this data");
    if (!names.empty() && data.empty())
      fail("its forward() takes inputs by name (" + takes + "), and the data holds one, under 'inputs': save them "
           "by name ({'" + names.front() + "': ..., 'labels': ...}, docs/byo.md)");
    for (const std::string& name : data)
      if (std::find(names.begin(), names.end(), name) == names.end())
        fail("the data holds '" + name + "', which its forward() does not take (it takes " + takes + ")");
    for (const std::string& name : names)
      if (std::find(data.begin(), data.end(), name) == data.end())
        fail("its forward() takes '" + name + "', which the data does not hold (it holds " + holds + ")");
    return names;
  }

  // The value a child's source names: "input" (one input), "input:NAME" (a named one), or
  // a child registered before child i.
  int valueOf(const std::string& source, int i, const Wiring& w) const {
    if (input_.named.empty() && source == kInputName) return 0;
    const std::string prefix = std::string(kInputName) + ":";
    if (!input_.named.empty() && source.rfind(prefix, 0) == 0)
      for (int k = 0; k < w.inputs; ++k)
        if (input_.named[k].name == source.substr(prefix.size())) return k;
    const auto [child, k] = childOutput(source);
    const auto at = std::find(names_.begin(), names_.begin() + i, child);
    if (at == names_.begin() + i)
      fail("child '" + names_[i] + "' reads '" + source + "', which is neither " +
           (input_.named.empty() ? "'input'" : "one of the model's inputs ('input:NAME')") +
           " nor a child registered before it (children run in the order they are registered, which must be a "
           "topological order)");
    return w.output(static_cast<int>(at - names_.begin())) + k;
  }

  // "NAME:k", the k-th output of child NAME, as (NAME, k); "NAME" as (NAME, 0).
  std::pair<std::string, int> childOutput(const std::string& source) const {
    const std::size_t colon = source.rfind(':');
    if (colon == std::string::npos) return {source, 0};
    const std::string index = source.substr(colon + 1);
    if (index.empty() || index.size() > 4 || !std::all_of(index.begin(), index.end(), ::isdigit))
      fail("'" + source + "' in " + kInputsAttribute + " is neither a child's name nor NAME:k, its k-th output");
    return {source.substr(0, colon), std::stoi(index)};
  }

  // Which values each child reads: `pipetrain_inputs`, or the previous child's output.
  Wiring wire() const {
    const int n = static_cast<int>(children_.size());
    Wiring w;
    w.named = !input_.named.empty();
    w.inputs = w.named ? static_cast<int>(input_.named.size()) : 1;
    w.outputs.assign(n, 1);
    auto number = [&] {
      w.first.clear();
      for (int i = 0, v = w.inputs; i < n; v += w.outputs[i++]) w.first.push_back(v);
    };
    if (!root_.hasattr(kInputsAttribute)) {
      number();
      for (int i = 0; i < n; ++i) w.reads.push_back({i == 0 ? 0 : w.output(i - 1)});
    } else {
      const c10::IValue attr = root_.attr(kInputsAttribute);
      if (!attr.isGenericDict()) fail(std::string(kInputsAttribute) + " must be a Dict[str, List[str]]");
      std::map<std::string, std::vector<std::string>> declared;
      for (const auto& entry : attr.toGenericDict()) {
        if (!entry.key().isString() || !entry.value().isList())
          fail(std::string(kInputsAttribute) + " must be a Dict[str, List[str]]");
        auto& list = declared[entry.key().toStringRef()];
        for (const auto& name : entry.value().toListRef()) {
          if (!name.isString()) fail(std::string(kInputsAttribute) + " must be a Dict[str, List[str]]");
          list.push_back(name.toStringRef());
        }
      }
      for (const auto& [child, unused] : declared)
        if (std::find(names_.begin(), names_.end(), child) == names_.end())
          fail(std::string(kInputsAttribute) + " names '" + child + "', which is not a child module");
      // A child has as many outputs as the highest k read of it says.
      for (const auto& [reader, sources] : declared)
        for (const auto& source : sources) {
          if (source.rfind(std::string(kInputName) + ":", 0) == 0) continue;
          const auto [child, k] = childOutput(source);
          const auto at = std::find(names_.begin(), names_.end(), child);
          if (at != names_.end()) w.outputs[at - names_.begin()] = std::max(w.outputs[at - names_.begin()], k + 1);
        }
      number();
      for (int i = 0; i < n; ++i) {
        auto it = declared.find(names_[i]);
        if (it == declared.end() || it->second.empty())
          fail(std::string(kInputsAttribute) + " gives no inputs for child '" + names_[i] + "'");
        std::vector<int> reads;
        for (const auto& source : it->second) reads.push_back(valueOf(source, i, w));
        w.reads.push_back(std::move(reads));
      }
      // Every child but the last must feed a later one; a dead branch would train nothing.
      for (int i = 0; i + 1 < n; ++i) {
        bool read = false;
        for (int j = i + 1; j < n; ++j)
          for (int v : w.reads[j]) read = read || (v >= w.output(i) && v < w.output(i) + w.outputs[i]);
        if (!read) fail("the output of child '" + names_[i] + "' is read by no later child");
      }
    }
    // A child's output is carried into child i if child i or a later one reads it. The
    // model's inputs are not carried: each child reading one takes it from the data.
    w.carried.resize(n + 1);
    for (int i = 1; i < n; ++i)
      for (int v = w.output(0); v < w.output(i); ++v) {
        bool needed = false;
        for (int j = i; j < n; ++j) needed = needed || std::count(w.reads[j].begin(), w.reads[j].end(), v);
        if (needed) w.carried[i].push_back(v);
      }
    w.carried[n] = {w.output(n - 1)};
    return w;
  }

  // One sample through the children in order (eval mode, no grad): every value's shape
  // and dtype, and a clear error for a child its inputs do not fit.
  void measure(Wiring& w) {
    torch::NoGradGuard no_grad;
    const ScriptEvalScope eval(root_);
    values_.clear();
    if (input_.named.empty()) values_.push_back(constantInput(input_, 1));
    for (const NamedInput& part : input_.named) {
      InputSpec one = input_;
      one.named.clear();
      one.sample_shape = part.sample_shape;
      one.kind = part.integer ? InputKind::kIndices : InputKind::kFeatures;
      values_.push_back(constantInput(one, 1));
    }
    for (int i = 0; i < w.layers(); ++i) {
      std::vector<c10::IValue> args;
      for (int v : w.reads[i]) args.emplace_back(values_[v]);
      if (!children_[i].find_method("forward"))
        fail("child '" + names_[i] + "' is a " + childKind(children_[i]) +
             ", a container with no forward() of its own, so it cannot be a layer" +
             kCaptureHint);
      c10::IValue y;
      try {
        y = children_[i].forward(args);
      } catch (const c10::Error& e) {
        fail("child '" + names_[i] + "' fails on its inputs (one sample of " + describeShape(w.reads[i]) +
             "): " + lastLine(e.what_without_backtrace()) + kCaptureHint);
      } catch (const std::exception& e) {  // the interpreter throws std::runtime_error
        fail("child '" + names_[i] + "' fails on its inputs (one sample of " + describeShape(w.reads[i]) +
             "): " + lastLine(e.what()) + kCaptureHint);
      }
      std::vector<c10::IValue> results = y.isTuple() ? y.toTupleRef().elements().vec() : std::vector<c10::IValue>{y};
      if (static_cast<int>(results.size()) < w.outputs[i])
        fail("child '" + names_[i] + "' returns " + std::to_string(results.size()) + " value(s), and a later child "
             "reads its output " + std::to_string(w.outputs[i] - 1) + " ('" + names_[i] + ":" +
             std::to_string(w.outputs[i] - 1) + "')");
      for (int k = 0; k < w.outputs[i]; ++k) {
        if (!results[k].isTensor())
          fail("child '" + names_[i] + "' returns a " + results[k].tagKind() + (w.outputs[i] > 1 ? " among its outputs" : "") +
               ", not a tensor");
        values_.push_back(results[k].toTensor());
      }
    }
    for (const auto& v : values_) {
      if (v.dim() == 0 || v.size(0) != 1) fail("a child's output has no batch dimension first");
      w.shapes.push_back(v.sizes().slice(1).vec());
      w.dtypes.push_back(v.scalar_type());
    }
  }

  // Which children modify an input in place: each runs once more, with grad, on leaves
  // that require grad, as a stage's first layer receives them.
  void findInPlaceChildren(const Wiring& w) {
    const ScriptEvalScope eval(root_);
    for (int i = 0; i < w.layers(); ++i) {
      std::vector<c10::IValue> args;
      for (int v : w.reads[i]) {
        torch::Tensor leaf = values_[v].detach().clone();
        if (leaf.is_floating_point()) leaf.set_requires_grad(true);
        args.emplace_back(leaf);
      }
      bool modifies = false;
      try {
        children_[i].forward(args);
      } catch (const std::exception& e) {
        modifies = std::string(e.what()).find("leaf Variable") != std::string::npos;
      }
      modifies_input_.push_back(modifies);
    }
  }

  // Weights that several children hold as one tensor (tied embeddings): the first holder
  // keeps the tensor and each later one gets its own copy in the module (the runtime keeps
  // the copies equal), so that every layer's parameters are its own.
  std::vector<TiedWeight> untie() {
    std::map<const void*, TiedWeight> shared;
    std::vector<const void*> order;
    for (int i = 0; i < static_cast<int>(children_.size()); ++i)
      for (const auto& p : children_[i].named_parameters(/*recurse=*/true)) {
        const void* key = p.value.unsafeGetTensorImpl();
        auto& holders = shared[key].holders;
        if (holders.empty()) order.push_back(key);
        if (holders.empty() || holders.back().layer != i) holders.push_back({i, p.name});
      }
    std::vector<TiedWeight> tied;
    for (const void* key : order) {
      TiedWeight& weight = shared[key];
      if (weight.holders.size() < 2) continue;
      for (std::size_t h = 1; h < weight.holders.size(); ++h) {
        auto& holder = weight.holders[h];
        torch::jit::Module owner = children_[holder.layer];
        std::string leaf = holder.name;
        for (auto dot = leaf.find('.'); dot != std::string::npos; dot = leaf.find('.')) {
          owner = owner.attr(leaf.substr(0, dot)).toModule();
          leaf = leaf.substr(dot + 1);
        }
        const torch::Tensor original = owner.attr(leaf).toTensor();
        owner.register_parameter(leaf, original.detach().clone().set_requires_grad(original.requires_grad()), false);
      }
      for (auto& holder : weight.holders) holder.name = scriptedTensorName(holder.name);
      tied.push_back(std::move(weight));
    }
    return tied;
  }

  std::string describeShape(const std::vector<int>& reads) const {
    std::string out;
    for (int v : reads) out += (out.empty() ? "" : ", ") + c10::str(values_[v].sizes());
    return out;
  }

  // The module's own forward must agree with its children run as declared, and its
  // output must fit the data's labels.
  void checkAgainstWhole() {
    torch::NoGradGuard no_grad;
    c10::IValue whole;
    std::vector<c10::IValue> inputs;  // in forward()'s order
    for (const std::string& name : input_names_) {
      const auto at = std::find_if(input_.named.begin(), input_.named.end(), [&](const NamedInput& p) { return p.name == name; });
      inputs.emplace_back(values_[at - input_.named.begin()]);
    }
    if (input_names_.empty()) inputs.emplace_back(values_.front());
    try {
      const ScriptEvalScope eval(root_);
      whole = root_.forward(inputs);
    } catch (const std::exception& e) {
      fail(std::string("forward() fails on one sample of the data's shape: ") + lastLine(e.what()));
    }
    const torch::Tensor& layered = values_.back();
    if (!whole.isTensor() || !whole.toTensor().sizes().equals(layered.sizes()) ||
        !torch::allclose(whole.toTensor(), layered, 1e-4, 1e-5))
      fail(root_.hasattr(kInputsAttribute)
               ? std::string("running the children as ") + kInputsAttribute +
                     " declares does not reproduce forward(); check the declared inputs"
               : std::string("running the top-level children in order does not reproduce forward(), which does "
                             "work between them") +
                     kCaptureHint);
    const auto out = layered.sizes();
    if (input_.loss == LossKind::kMeanSquaredError) {
      if (layered.numel() != input_.num_classes)
        fail("its output " + c10::str(out) + " has " + std::to_string(layered.numel()) +
             " values per sample, and the data's labels are float: regression targets, " +
             std::to_string(input_.num_classes) +
             " per sample; class labels are integers (save them with labels.long())");
    } else if (input_.kind == InputKind::kTokens) {
      const int64_t positions = input_.label_positions > 0 ? input_.label_positions : input_.sample_shape.at(0);
      if (out.size() != 3 || out[1] != positions || out[2] < input_.num_classes)
        fail("its output " + c10::str(out) + " does not fit the data's labels (1, " + std::to_string(positions) +
             ") below " + std::to_string(input_.num_classes) + ": (1, " + std::to_string(positions) + ", V >= " +
             std::to_string(input_.num_classes) + ")");
    } else if (out.size() != 2 || out[1] < input_.num_classes) {
      fail("its output " + c10::str(out) + " does not fit the data's labels: class scores (1, C) with C >= " +
           std::to_string(input_.num_classes) + " (the largest label + 1)");
    }
  }

  std::string path_;
  std::string shown_;  // how refusals name the model
  InputSpec input_;
  torch::jit::Module root_;
  std::vector<std::string> names_;
  std::vector<torch::jit::Module> children_;
  std::vector<std::string> input_names_;  // declaredInputNames()
  std::vector<torch::Tensor> values_;  // one sample's values, from measure()
  std::vector<bool> modifies_input_;   // per child, from findInPlaceChildren()
};

}  // namespace

Model loadScriptedModel(const std::string& path, const InputSpec& input, const std::string& name) {
  // TorchScript's optimizing executor differentiates a layer with its own symbolic
  // formulas, which ran a GPT block's backward pass 7-9% slower than autograd's native
  // kernels (docs/runtime.md, the race). Unoptimized, each operation records its native
  // backward, as in eager PyTorch. Process-wide: every layer loaded from a file runs so.
  torch::jit::setGraphExecutorOptimize(false);
  return Loader(path, input, name).load();
}

std::string scriptedTensorName(std::string path_in_child) {
  std::replace(path_in_child.begin(), path_in_child.end(), '.', '_');  // registered names may not hold dots
  return path_in_child;
}

void saveScriptedModel(const Model& model, const std::string& path) {
  if (!model.script) throw Error("model '" + model.name + "' is not from a TorchScript file; only those export");
  std::ostringstream bytes;
  try {
    model.script->save(bytes);
  } catch (const c10::Error& e) {
    throw Error("cannot write '" + path + "': " + e.what_without_backtrace());
  }
  text::writeFileAtomically(path, bytes.str());  // a failed save never leaves half a file
}

}  // namespace pipetrain::models
