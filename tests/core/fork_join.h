// forkJoin: a multi-branch layer graph for planner tests and benchmarks. `count`
// branches of `length` layers each read the model input; one `join` layer reads every
// branch's last layer. `layer(b, k)` gives the k-th layer of branch b its costs; its name
// ("b{b}_{k}") and inputs are set here, as are the join's inputs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "pipetrain/graph/layer_graph.h"

namespace pipetrain::testing {

inline graph::LayerGraph forkJoin(int count, int length, const std::function<graph::Layer(int b, int k)>& layer,
                                  graph::Layer join) {
  std::vector<graph::Layer> layers;
  for (int b = 0; b < count; ++b)
    for (int k = 0; k < length; ++k) {
      graph::Layer l = layer(b, k);
      l.name = "b" + std::to_string(b) + "_" + std::to_string(k);
      l.inputs = k ? std::vector<std::string>{layers.back().name} : std::vector<std::string>{};
      layers.push_back(l);
      if (k == length - 1) join.inputs.push_back(l.name);
    }
  layers.push_back(join);
  return graph::LayerGraph(layers, 1);
}

}  // namespace pipetrain::testing
