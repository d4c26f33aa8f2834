// The executor's backward passes (executor_impl.h): B, or I then W, on the weights the
// Program names, after the forward pass again where the stage recomputes.
#include "executor_impl.h"

#include "pipetrain/util/error.h"

namespace pipetrain::runtime {

void PipelineExecutor::Impl::recomputeForward(const Action& a) {
  const int s = a.stage, j = a.microbatch;
  Activation& act = live.at({s, j});
  const torch::Tensor labels = act.replay->labels();
  const std::map<std::string, torch::Tensor> values = forwardAgain(a, stages[s].layers);
  if (facts.split_stages.count(s))
    for (int l : stages[s].layers) act.layer_outputs.push_back(values.at(model.layers[l].name));
  act.outputs = sentOutputs(*program, s, values);
  if (program->isLastStage(s))
    act.loss = models::lossOf(model, modelOutput(values), labels) * facts.steps.loss_scale[j];
}

std::map<std::string, torch::Tensor> PipelineExecutor::Impl::forwardAgain(const Action& a,
                                                                          const std::vector<int>& layers) {
  const int s = a.stage, j = a.microbatch;
  Activation& act = live.at({s, j});
  const ForwardReplay replay = std::move(*act.replay);
  act.replay.reset();
  StageState& st = state.at(s);
  AutocastScope autocast(precision, st.device);
  std::map<std::string, torch::Tensor> values;
  auto what = [&] { return "rank " + std::to_string(rank) + ": recomputing " + schedule::toString(a); };
  withVersion(st, facts.forward_version.at({s, j}), 0, what, [&] {
    replay.run(recomputed_buffers.at(s), [&] { values = models::forwardLayers(model, layers, replay.inputs()); });
  });
  return values;
}

std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> PipelineExecutor::Impl::backwardRoots(
    const Action& a, const schedule::PositionFacts& at) {
  const int s = a.stage, j = a.microbatch;
  Activation& act = live.at({s, j});
  if (program->isLastStage(s)) return {{act.loss}, {torch::ones_like(act.loss)}};
  std::map<int, torch::Tensor> grads;  // per output layer
  for (std::size_t c = 0; c < program->stage_succs[s].size(); ++c) {
    const int t = program->stage_succs[s][c];
    const Edge& edge = edges.at({s, t});
    torch::Tensor message;
    if (at.input_slots[c] < 0) {
      Activation& consumer = live.at({t, j});
      message = consumer.input_grads.at(s);
      consumer.input_grads.erase(s);
      finishIfDone(t, j);
    } else {
      message = takeMail(at.input_slots[c]);
    }
    const std::vector<torch::Tensor> parts = edge.unpack(message);
    for (std::size_t k = 0; k < parts.size(); ++k) {
      auto [it, fresh] = grads.emplace(edge.layers[k], parts[k]);
      if (!fresh) it->second = it->second + parts[k];
    }
  }
  std::vector<torch::Tensor> roots, root_grads;
  for (const auto& [l, g] : grads) {
    roots.push_back(act.outputs.at(l));
    root_grads.push_back(g);
  }
  return {roots, root_grads};
}

void PipelineExecutor::Impl::packInputGrads(int s, Activation& act, const std::vector<torch::Tensor>& grads) {
  std::size_t k = 0;
  for (const auto& [q, leaves] : act.inputs) {
    std::vector<torch::Tensor> part;
    for (const torch::Tensor& leaf : leaves) {
      part.push_back(grads[k].defined() ? grads[k] : torch::zeros_like(leaf));
      ++k;
    }
    act.input_grads[q] = edges.at({q, s}).pack(part);
  }
}

void PipelineExecutor::Impl::backward(const Action& a, const schedule::PositionFacts& at) {
  const int s = a.stage;
  const auto part = part_recomputed.find(s);
  if (part == part_recomputed.end() && live.at({s, a.microbatch}).replay) recomputeForward(a);
  auto [roots, root_grads] = backwardRoots(a, at);
  Activation& act = live.at({s, a.microbatch});
  std::vector<torch::Tensor> leaves;
  for (const auto& [q, tensors] : act.inputs) leaves.insert(leaves.end(), tensors.begin(), tensors.end());
  if (part != part_recomputed.end()) {
    packInputGrads(s, act, backwardInTwo(a, part->second, roots, root_grads, leaves));
    act.weights_pending = a.type == ActionType::I;
  } else
    withWeights(a, [&] {
      if (a.type == ActionType::B) {
        torch::autograd::backward(roots, root_grads);
        std::vector<torch::Tensor> grads;
        for (const auto& leaf : leaves) grads.push_back(leaf.grad());
        packInputGrads(s, act, grads);
        return;
      }
      // I: the inputs' and layer outputs' gradients, keeping what W starts from
      // (NOTE(split-backward)); the graph stays for W.
      std::vector<torch::Tensor> targets = std::move(act.layer_outputs);
      targets.insert(targets.end(), leaves.begin(), leaves.end());
      const std::size_t layers = targets.size() - leaves.size();
      const std::vector<torch::Tensor> grads = act.split.inputPass(roots, root_grads, targets, state.at(s).params);
      packInputGrads(s, act, std::vector<torch::Tensor>(grads.begin() + layers, grads.end()));
      act.weights_pending = true;
    });
  if (!act.weights_pending) {  // B: the graph is spent
    act.outputs.clear();
    act.loss.reset();
    act.inputs.clear();
  }
  finishIfDone(s, a.microbatch);
}

std::vector<torch::Tensor> PipelineExecutor::Impl::backwardInTwo(const Action& a, const PartRecomputed& part,
                                                                 const std::vector<torch::Tensor>& roots,
                                                                 const std::vector<torch::Tensor>& root_grads,
                                                                 const std::vector<torch::Tensor>& leaves) {
  Activation& act = live.at({a.stage, a.microbatch});
  const bool split = a.type == ActionType::I;
  std::map<int, torch::Tensor> kept_grads;  // by layer
  auto add = [&](int l, const torch::Tensor& g) {
    if (!g.defined()) return;
    auto [it, fresh] = kept_grads.emplace(l, g);
    if (!fresh) it->second = it->second + g;
  };
  // A kept output sent to a later stage is a root: its gradient seeds the second call.
  std::vector<torch::Tensor> rest_roots, rest_grads, kept_leaves;
  for (std::size_t i = 0; i < roots.size(); ++i) {
    const auto k =
        std::find_if(act.kept.begin(), act.kept.end(), [&](const auto& p) { return p.second.is_same(roots[i]); });
    if (k != act.kept.end()) {
      add(k->first, root_grads[i]);
    } else {
      rest_roots.push_back(roots[i]);
      rest_grads.push_back(root_grads[i]);
    }
  }
  for (const auto& [l, leaf] : act.kept) kept_leaves.push_back(leaf);
  std::vector<torch::Tensor> input_grads(leaves.size());
  withWeights(a, [&] {
    if (rest_roots.empty()) return;
    if (!split) {
      torch::autograd::backward(rest_roots, rest_grads);
      for (std::size_t k = 0; k < kept_leaves.size(); ++k) add(act.kept[k].first, kept_leaves[k].grad());
      return;
    }
    std::vector<torch::Tensor> targets = std::move(act.layer_outputs);
    const std::size_t first = targets.size();
    targets.insert(targets.end(), kept_leaves.begin(), kept_leaves.end());
    targets.insert(targets.end(), leaves.begin(), leaves.end());
    const std::vector<torch::Tensor> g = act.split.inputPass(rest_roots, rest_grads, targets, state.at(a.stage).params);
    for (std::size_t k = 0; k < kept_leaves.size(); ++k) add(act.kept[k].first, g[first + k]);
    for (std::size_t i = 0; i < leaves.size(); ++i) input_grads[i] = g[first + kept_leaves.size() + i];
  });
  act.kept.clear();
  const std::map<std::string, torch::Tensor> again = forwardAgain(a, part.layers);
  std::vector<torch::Tensor> again_roots, again_grads;
  for (const auto& [l, g] : kept_grads) {
    again_roots.push_back(again.at(model.layers[l].name));
    again_grads.push_back(g);
  }
  withWeights(a, [&] {
    if (!split) {  // .grad of the inputs now holds both calls' sums
      if (!again_roots.empty()) torch::autograd::backward(again_roots, again_grads);
      for (std::size_t i = 0; i < leaves.size(); ++i) input_grads[i] = leaves[i].grad();
      return;
    }
    if (again_roots.empty()) return;
    std::vector<torch::Tensor> targets;  // W of the recomputed layers starts from their outputs
    for (int l : part.layers) targets.push_back(again.at(model.layers[l].name));
    const std::size_t first = targets.size();
    targets.insert(targets.end(), leaves.begin(), leaves.end());
    const std::vector<torch::Tensor> g =
        act.recomputed_split.inputPass(again_roots, again_grads, targets, state.at(a.stage).params);
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      const torch::Tensor& more = g[first + i];
      if (more.defined()) input_grads[i] = input_grads[i].defined() ? input_grads[i] + more : more;
    }
  });
  return input_grads;
}

void PipelineExecutor::Impl::weightBackward(const Action& a) {
  Activation& act = live.at({a.stage, a.microbatch});
  withWeights(a, [&] {
    act.split.weightPass();
    act.recomputed_split.weightPass();
  });
  act.outputs.clear();
  act.loss.reset();
  act.inputs.clear();
  act.weights_pending = false;
  finishIfDone(a.stage, a.microbatch);
}

void PipelineExecutor::Impl::finishIfDone(int s, int j) {
  const Activation& act = live.at({s, j});
  if (!act.weights_pending && act.input_grads.empty() && !act.loss.defined() && act.outputs.empty()) live.erase({s, j});
}

}  // namespace pipetrain::runtime
