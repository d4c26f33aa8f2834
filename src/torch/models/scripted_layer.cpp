// A TorchScript file's child as a layer (scripted_layer.h).
#include "scripted_layer.h"

#include <map>
#include <numeric>

#include "pipetrain/torch/models.h"
#include "pipetrain/util/error.h"

namespace pipetrain::models::scripted {
namespace {

// The values `ids` from x, (N, their numels) fp32, each with its shape and dtype again.
std::vector<torch::Tensor> split(const Wiring& w, const std::vector<int>& ids, const torch::Tensor& x) {
  std::vector<torch::Tensor> out;
  int64_t offset = 0;
  for (int v : ids) {
    std::vector<int64_t> shape{x.size(0)};
    shape.insert(shape.end(), w.shapes[v].begin(), w.shapes[v].end());
    const int64_t numel = w.sampleNumel(v);
    out.push_back(x.narrow(1, offset, numel).reshape(shape).to(w.dtypes[v]));
    offset += numel;
  }
  return out;
}

std::vector<torch::Tensor> unpack(const Wiring& w, int i, const torch::Tensor& x) {
  return w.packed(i) ? split(w, w.carried[i], x) : std::vector<torch::Tensor>{x};
}

torch::Tensor pack(const Wiring& w, int i, const std::vector<torch::Tensor>& values) {
  return w.packed(i) ? flatPack(values) : values.front();
}

// One child as a layer: Tensor -> Tensor over the carried representation. Its
// parameters and buffers are registered here as the very tensors the TorchScript module
// holds, so the optimizer's in-place updates are the module's weights.
class ScriptedLayerImpl : public torch::nn::Module {
 public:
  ScriptedLayerImpl(std::string name, torch::jit::Module child, std::shared_ptr<const Wiring> wiring, int index,
                    bool modifies_input)
      : name_(std::move(name)), child_(std::move(child)), wiring_(std::move(wiring)), index_(index),
        modifies_input_(modifies_input) {
    for (const auto& p : child_.named_parameters(/*recurse=*/true))
      register_parameter(scriptedTensorName(p.name), p.value, p.value.requires_grad());
    for (const auto& b : child_.named_buffers(/*recurse=*/true)) register_buffer(scriptedTensorName(b.name), b.value);
  }

  torch::Tensor forward(torch::Tensor x) {
    // A stage's input is a leaf that autograd forbids modifying in place (nn.ReLU(inplace=True)
    // first on a stage); such a child gets a copy.
    if (modifies_input_ && x.is_leaf() && x.requires_grad()) x = x.clone();
    const Wiring& w = *wiring_;
    std::map<int, torch::Tensor> values = valuesIn(x);
    std::vector<c10::IValue> args;
    for (int v : w.reads[index_]) args.emplace_back(values.at(v));
    std::vector<torch::Tensor> y;
    try {
      const c10::IValue result = child_.forward(std::move(args));
      if (result.isTuple())
        for (const c10::IValue& element : result.toTupleRef().elements()) y.push_back(element.toTensor());
      else
        y.push_back(result.toTensor());
    } catch (const c10::Error& e) {  // the model's own refusal, in its words, without the interpreter's traceback
      throw Error("layer '" + name_ + "' fails on a micro-batch of " + std::to_string(x.size(0)) + ": " +
                  lastLine(e.what_without_backtrace()));
    } catch (const std::exception& e) {  // the interpreter's std::runtime_error
      throw Error("layer '" + name_ + "' fails on a micro-batch of " + std::to_string(x.size(0)) + ": " +
                  lastLine(e.what()));
    }
    for (int k = 0; k < w.outputs[index_]; ++k) values[w.output(index_) + k] = y.at(k);
    std::vector<torch::Tensor> out;
    for (int v : w.carried[index_ + 1]) out.push_back(values.at(v));
    return pack(w, index_ + 1, out);
  }

  void train(bool on) override {
    torch::nn::Module::train(on);
    child_.train(on);
  }

 private:
  // What x holds, by value: the first child's is the model's input (one, as it is, or the
  // named inputs' pack); a later child's what the child before hands on, followed, where
  // it reads the model's input, by that input flattened (Merge::kPack).
  std::map<int, torch::Tensor> valuesIn(const torch::Tensor& x) const {
    const Wiring& w = *wiring_;
    std::vector<int> ids;
    std::vector<torch::Tensor> parts;
    std::vector<int> inputs(w.inputs);
    std::iota(inputs.begin(), inputs.end(), 0);
    if (index_ == 0) {
      ids = inputs;
      parts = w.named ? split(w, inputs, x) : std::vector<torch::Tensor>{x};
    } else if (!w.readsInput(index_)) {
      ids = w.carried[index_];
      parts = unpack(w, index_, x);
    } else {
      const int64_t carried = w.sampleNumel(w.carried[index_]);
      const torch::Tensor handed = x.narrow(1, 0, carried);
      ids = w.carried[index_];
      parts = split(w, ids, handed);  // a pack, or the one fp32 value flattened
      const std::vector<torch::Tensor> given = split(w, inputs, x.narrow(1, carried, x.size(1) - carried));
      ids.insert(ids.end(), inputs.begin(), inputs.end());
      parts.insert(parts.end(), given.begin(), given.end());
    }
    std::map<int, torch::Tensor> out;
    for (std::size_t k = 0; k < ids.size(); ++k) out[ids[k]] = parts[k];
    return out;
  }

  std::string name_;
  torch::jit::Module child_;
  std::shared_ptr<const Wiring> wiring_;
  int index_;
  bool modifies_input_;
};
TORCH_MODULE(ScriptedLayer);

}  // namespace

// The last line says what went wrong ("RuntimeError: mat1 and mat2 shapes cannot be
// multiplied (1x5 and 16x64)").
std::string lastLine(std::string message) {
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  return message.substr(message.rfind('\n') + 1);  // npos + 1 == 0: the whole message
}

torch::nn::AnyModule layer(std::string name, torch::jit::Module child, std::shared_ptr<const Wiring> wiring,
                           int index, bool modifies_input) {
  return torch::nn::AnyModule(ScriptedLayer(std::move(name), std::move(child), std::move(wiring), index, modifies_input));
}

}  // namespace pipetrain::models::scripted
