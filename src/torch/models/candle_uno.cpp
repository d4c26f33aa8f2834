// candle-uno: CANDLE's Uno (drug response) shape: wide feed-forward branches, one per
// kind of feature (a tumour's gene expression, a drug's descriptors, its fingerprints),
// concatenated, then a fusion layer and a head.
//
// The input is one float tensor per sample, (N, branches x features): branch i reads
// columns [i x features, (i + 1) x features). Uno regresses a growth value; here the head
// gives class scores (e.g. classes = 2: growth below or above a threshold), so that the
// model trains on any data set with class labels.
//
// Layers: b{i}_fc0 .. b{i}_fc{L-1} per branch (linear + ReLU, `width` wide), fusion
// (reads every branch's last layer; linear + ReLU), head (-> classes).
#include "zoo.h"

namespace pipetrain::models::zoo {

namespace nn = torch::nn;

Model buildCandleUno(const ModelConfig& config) {
  const Options opt("candle-uno", config,
                    {{"branches", 3}, {"features", 128}, {"layers", 2}, {"width", 256}, {"classes", 2}});
  const int64_t branches = opt.atLeast("branches", 1);
  const int64_t features = opt.atLeast("features", 1);
  const int64_t layers = opt.atLeast("layers", 1);
  const int64_t width = opt.atLeast("width", 1);
  const int64_t classes = opt.atLeast("classes", 2);

  Model model;
  model.input = {InputKind::kFeatures, {branches * features}, classes};
  std::vector<std::string> ends;
  for (int64_t b = 0; b < branches; ++b) {
    for (int64_t i = 0; i < layers; ++i) {
      const std::string name = "b" + std::to_string(b) + "_fc" + std::to_string(i);
      if (i == 0) {
        model.layers.push_back(stackLayer(name, "linear",
                                          nn::Sequential(Columns(b * features, features),  // (N, features)
                                                         nn::Linear(features, width), nn::ReLU()),  // (N, width)
                                          {kModelInput}));
      } else {
        model.layers.push_back(stackLayer(name, "linear", nn::Sequential(nn::Linear(width, width), nn::ReLU())));
      }
    }
    ends.push_back(model.layers.back().name);
  }
  addFusionHead(model, ends, branches * width, width, classes);  // (N, branches x width) -> (N, classes)
  return model;
}

}  // namespace pipetrain::models::zoo
