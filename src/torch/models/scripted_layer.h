// Internal to the models from TorchScript files (scripted.cpp): how a file's children
// run as pipetrain's layers. A DAG of children runs as a chain of layers, each layer
// carrying across its boundary every child's output a later child still reads; several
// such tensors travel as one fp32 pack (N, total) that the next layer splits again, so
// stages, messages and autograd see one tensor per boundary. A child reading the model's
// input takes it from the data, beside what the layer before hands on.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <torch/script.h>
#include <torch/torch.h>

namespace pipetrain::models::scripted {

// Values 0 .. inputs - 1 are the model's inputs (one, or each named input in
// InputSpec::named's order), then each child's outputs in turn: most children have one;
// a child returning a tuple of which later children read the k-th ("NAME:k") has as
// many as are read (T5's first block: its hidden states and the position bias).
struct Wiring {
  int inputs = 1;
  bool named = false;                         // the model's input is the named inputs' pack (packInputs)
  std::vector<int> first;                     // per child: its first output's value
  std::vector<int> outputs;                   // per child: how many it has
  std::vector<std::vector<int>> reads;        // per child: the values it takes, in order
  std::vector<std::vector<int>> carried;      // carried[i]: the children's outputs entering child i
  std::vector<std::vector<int64_t>> shapes;   // per value: one sample's shape
  std::vector<c10::ScalarType> dtypes;        // per value

  int layers() const { return static_cast<int>(reads.size()); }
  int output(int child) const { return first[child]; }
  // Whether child i (> 0) reads a model input: it takes the model input from the data
  // beside what the previous child hands on (Layer::inputs, Merge::kPack).
  bool readsInput(int i) const {
    return i > 0 && std::any_of(reads[i].begin(), reads[i].end(), [&](int v) { return v < inputs; });
  }
  // Whether the tensor entering child i (i == layers(): leaving the last) from the child
  // before is a pack. A single fp32 value travels as it is, which is every boundary of a chain.
  bool packed(int i) const {
    if (i == 0 || i == layers()) return false;
    return carried[i].size() != 1 || dtypes[carried[i][0]] != torch::kFloat;
  }
  int64_t sampleNumel(int value) const { return c10::multiply_integers(shapes[value]); }
  int64_t sampleNumel(const std::vector<int>& values) const {
    int64_t n = 0;
    for (int v : values) n += sampleNumel(v);
    return n;
  }
};

// The TorchScript interpreter's errors carry both tracebacks: their last line.
std::string lastLine(std::string message);

// Child `index` of the file as a layer: Tensor -> Tensor over the carried representation.
// `modifies_input`: the child modifies an input in place, so a stage's leaf input is copied.
torch::nn::AnyModule layer(std::string name, torch::jit::Module child, std::shared_ptr<const Wiring> wiring,
                           int index, bool modifies_input);

}  // namespace pipetrain::models::scripted
