#include "stage_edges.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>

#include "pipetrain/util/error.h"

namespace pipetrain::runtime {

namespace {

// A layer's output for one micro-batch, as a dry run found it.
struct Produced {
  std::vector<int64_t> shape;
  torch::ScalarType dtype = torch::kFloat;

  bool operator==(const Produced& o) const { return shape == o.shape && dtype == o.dtype; }
  bool operator!=(const Produced& o) const { return !(*this == o); }
  int64_t bytes() const { return c10::multiply_integers(shape) * static_cast<int64_t>(c10::elementSize(dtype)); }
};

std::vector<Produced> dryRun(const models::Model& model, int64_t samples, Precision precision) {
  std::vector<Produced> produced(model.layers.size());
  torch::NoGradGuard no_grad;
  AutocastScope autocast(precision, model.device);  // messages have the dtypes training sends
  models::forwardModel(model, models::constantInput(model.input, samples).to(model.device),
                       [&](int l, const torch::Tensor& y) { produced[l] = {y.sizes().vec(), y.scalar_type()}; });
  return produced;
}

// Each layer's output at `samples`, from dry runs of 1, 2 and 3 samples where every
// output's dimensions grow in step with the samples (s(n) = s(1) + (n - 1) (s(2) - s(1)),
// checked at 3), else from one at `samples`. A dry run at the micro-batch held one
// layer's passing tensors at a time, and the heap keeps what it frees
// (util/allocator.h): fmnist-cnn's ranks at 64 samples began training with 19 MB of it.
std::vector<Produced> producedAt(const models::Model& model, int64_t samples, Precision precision) {
  const models::EvalScope eval(model.layers);  // no dropout drawn, no statistics moved, one sample allowed
  if (samples <= 3) return dryRun(model, samples, precision);
  const std::vector<Produced> one = dryRun(model, 1, precision), two = dryRun(model, 2, precision),
                              three = dryRun(model, 3, precision);
  const auto grown = [](const Produced& a, const Produced& b, int64_t n) -> std::optional<Produced> {
    if (a.shape.size() != b.shape.size() || a.dtype != b.dtype) return std::nullopt;
    Produced at = a;
    for (std::size_t d = 0; d < a.shape.size(); ++d) at.shape[d] = a.shape[d] + (n - 1) * (b.shape[d] - a.shape[d]);
    return at;
  };
  std::vector<Produced> out;
  for (std::size_t l = 0; l < one.size(); ++l) {
    if (grown(one[l], two[l], 3) != three[l]) return dryRun(model, samples, precision);
    out.push_back(*grown(one[l], two[l], samples));
  }
  return out;
}

}  // namespace

StageEdges stageEdges(const models::Model& model, const std::vector<StageLayers>& stages,
                      const schedule::Program& program, int64_t microbatch_size, Precision precision) {
  StageEdges out;
  const int layers = static_cast<int>(model.layers.size());
  std::vector<int> stage_of(layers, -1);
  for (int s = 0; s < program.num_stages; ++s)
    for (int l : stages[s].layers) {
      if (l < 0 || l >= layers || stage_of[l] >= 0)
        throw Error("stage " + std::to_string(s) + ": layer index " + std::to_string(l) +
                    " is outside the model or in two stages");
      stage_of[l] = s;
    }
  const std::vector<Produced> produced = producedAt(model, microbatch_size, precision);
  for (int l = 0; l < layers; ++l)
    for (const std::string& input : models::layerInputs(model, l)) {
      if (input == models::kModelInput) continue;
      const int producer = static_cast<int>(std::find_if(model.layers.begin(), model.layers.end(),
                                                         [&](const models::Layer& x) { return x.name == input; }) -
                                            model.layers.begin());
      const int from = stage_of.at(producer), to = stage_of[l];
      if (from == to) continue;
      Edge& edge = out.edges[{from, to}];
      if (std::find(edge.layers.begin(), edge.layers.end(), producer) == edge.layers.end()) edge.layers.push_back(producer);
    }
  out.output_bytes.assign(program.num_stages, 0);
  std::set<int> counted;  // each output once, however many stages read it
  for (auto& [ends, edge] : out.edges) {
    std::sort(edge.layers.begin(), edge.layers.end());
    const auto& succs = program.stage_succs[ends.first];
    if (std::find(succs.begin(), succs.end(), ends.second) == succs.end())
      throw Error("stage " + std::to_string(ends.second) + " reads stage " + std::to_string(ends.first) +
                  ", which the schedule does not connect to it");
    for (int l : edge.layers) {
      const Produced& y = produced[l];
      if (edge.packed() && y.dtype != torch::kFloat)
        throw Error("layer '" + model.layers[l].name + "' sends a " + std::string(c10::toString(y.dtype)) +
                    " tensor to another stage beside others; only fp32 tensors travel packed");
      edge.shapes.push_back(y.shape);
      edge.dtype = y.dtype;
      if (counted.insert(l).second) out.output_bytes[ends.first] += y.bytes();
    }
  }
  for (int s = 0; s < program.num_stages; ++s)
    for (int t : program.stage_succs[s])
      if (!out.edges.count({s, t}))
        throw Error("the schedule connects stage " + std::to_string(s) + " to stage " + std::to_string(t) +
                    ", but no layer of the second reads the first");
  return out;
}

}  // namespace pipetrain::runtime
