// dlrm: a deep learning recommendation model (Naumov et al. 2019), DLRM's shape at a
// small size: a bottom MLP over dense features and one embedding table per categorical
// feature, their pairwise dot products, and a top MLP.
//
// The input is one float tensor per sample, (N, dense + tables): the first `dense`
// columns are the dense features, the last `tables` columns one categorical value per
// table, stored as a float. Each branch's first layer reads the whole input and selects
// its own columns. A table turns its value into a row by the hashing trick DLRM's data
// pipelines use, floor(value) mod rows (so any float, synthetic data's too, is a valid
// category), and looks it up as an embedding bag of one.
//
// Layers: bottom0, bottom1 (dense -> hidden -> dim), table0 .. table{k-1} (-> dim each),
// interaction (reads bottom1 and every table: the dense vector and the pairwise dot
// products of the k + 1 vectors, dim + (k + 1) k / 2 values), top0 (-> hidden), head
// (-> classes; a click is classes = 2).
#include <cmath>

#include "zoo.h"

namespace pipetrain::models::zoo {

namespace nn = torch::nn;

namespace {

// One categorical column (N, 1) as a float -> its table row (N, dim).
struct LookupImpl : nn::Module {
  LookupImpl(int64_t rows, int64_t dim)
      : rows(rows), bag(register_module("bag", nn::EmbeddingBag(nn::EmbeddingBagOptions(rows, dim).mode(torch::kSum)))) {
    // DLRM's initialisation, U(-1/sqrt(rows), 1/sqrt(rows)): N(0, 1) rows would make the
    // dot products of the interaction grow with dim.
    torch::NoGradGuard no_grad;
    const double bound = 1.0 / std::sqrt(static_cast<double>(rows));
    bag->weight.uniform_(-bound, bound);
  }
  torch::Tensor forward(torch::Tensor x) {  // (N, 1) float
    // remainder() of an integer by a positive divisor is never negative.
    const torch::Tensor index = x.floor().to(torch::kLong).remainder(rows);  // (N, 1): one bag of one per sample
    return bag->forward(index);                                              // (N, dim)
  }
  int64_t rows;
  nn::EmbeddingBag bag;
};
TORCH_MODULE(Lookup);

// (N, (k + 1) x dim), the dense vector first -> (N, dim + (k + 1) k / 2): the dense
// vector and the dot product of every pair of the k + 1 vectors. No parameters.
struct InteractionImpl : nn::Module {
  InteractionImpl(int64_t vectors, int64_t dim) : vectors(vectors), dim(dim) {}
  torch::Tensor forward(torch::Tensor x) {
    const torch::Tensor v = x.view({x.size(0), vectors, dim});  // (N, k + 1, dim)
    const torch::Tensor dots = torch::bmm(v, v.transpose(1, 2));  // (N, k + 1, k + 1)
    // The strict lower triangle: each pair once, no vector with itself. Built per call on
    // the input's device, so that it is neither state nor left behind by .to(device).
    const torch::Tensor pairs = torch::tril_indices(vectors, vectors, -1, x.options().dtype(torch::kLong));  // (2, P)
    const torch::Tensor flat = dots.index({torch::indexing::Slice(), pairs[0], pairs[1]});  // (N, P)
    return torch::cat({x.narrow(1, 0, dim), flat}, 1);  // (N, dim + P)
  }
  int64_t vectors, dim;
};
TORCH_MODULE(Interaction);

}  // namespace

Model buildDlrm(const ModelConfig& config) {
  const Options opt("dlrm", config,
                    {{"dense", 13}, {"tables", 4}, {"rows", 1000}, {"dim", 16}, {"hidden", 64}, {"classes", 2}});
  const int64_t dense = opt.atLeast("dense", 1);
  const int64_t tables = opt.atLeast("tables", 1);
  const int64_t rows = opt.atLeast("rows", 1);
  const int64_t dim = opt.atLeast("dim", 1);
  const int64_t hidden = opt.atLeast("hidden", 1);
  const int64_t classes = opt.atLeast("classes", 2);

  Model model;
  model.input = {InputKind::kFeatures, {dense + tables}, classes};
  model.layers.push_back(stackLayer("bottom0", "linear",
                                    nn::Sequential(Columns(0, dense), nn::Linear(dense, hidden), nn::ReLU()),  // (N, hidden)
                                    {kModelInput}));
  model.layers.push_back(stackLayer("bottom1", "linear", nn::Sequential(nn::Linear(hidden, dim), nn::ReLU())));  // (N, dim)
  std::vector<std::string> vectors = {"bottom1"};  // the dense vector first: interaction keeps it
  for (int64_t t = 0; t < tables; ++t) {
    model.layers.push_back(stackLayer("table" + std::to_string(t), "embedding",
                                      nn::Sequential(Columns(dense + t, 1), Lookup(rows, dim)),  // (N, dim)
                                      {kModelInput}));
    vectors.push_back(model.layers.back().name);
  }
  const int64_t pairs = (tables + 1) * tables / 2;
  model.layers.push_back(Layer{"interaction", "interaction", nn::AnyModule(Interaction(tables + 1, dim)), vectors});
  model.layers.push_back(stackLayer("top0", "linear", nn::Sequential(nn::Linear(dim + pairs, hidden), nn::ReLU())));
  model.layers.push_back(stackLayer("head", "linear", nn::Sequential(nn::Linear(hidden, classes))));  // (N, classes)
  return model;
}

}  // namespace pipetrain::models::zoo
