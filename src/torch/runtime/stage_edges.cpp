#include "stage_edges.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <string>

#include "pipetrain/util/error.h"

namespace pipetrain::runtime {

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
  // Message shapes from a dry run of one micro-batch through the whole model; the edges
  // from which layers read which.
  std::map<std::string, torch::Tensor> values;
  {
    torch::NoGradGuard no_grad;
    AutocastScope autocast(precision, model.device);  // messages have the dtypes training sends
    std::vector<int> all(layers);
    std::iota(all.begin(), all.end(), 0);
    values = models::forwardLayers(
        model, all, {{models::kModelInput, models::constantInput(model.input, microbatch_size).to(model.device)}});
  }
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
      const torch::Tensor& y = values.at(model.layers[l].name);
      if (edge.packed() && y.scalar_type() != torch::kFloat)
        throw Error("layer '" + model.layers[l].name + "' sends a " + std::string(c10::toString(y.scalar_type())) +
                    " tensor to another stage beside others; only fp32 tensors travel packed");
      edge.shapes.push_back(y.sizes().vec());
      edge.dtype = y.scalar_type();
      if (counted.insert(l).second) out.output_bytes[ends.first] += models::tensorBytes(y);
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
