#include "split_backward.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

namespace pipetrain::runtime {
namespace {

// Not `using`: this file is compiled in one unit with others that have an Edge of their own.
namespace ag = torch::autograd;

// The slice of the autograd graph below the roots, with what the split needs of each node.
class GraphFacts {
 public:
  GraphFacts(const std::vector<ag::Edge>& roots, const std::vector<ag::Edge>& targets, const std::vector<ag::Edge>& params) {
    for (const ag::Edge& e : targets) target_edges_.insert({e.function.get(), e.input_nr});
    for (std::size_t k = 0; k < params.size(); ++k) param_of_.emplace(params[k].function.get(), k);
    words_ = (params.size() + 63) / 64;
    for (const ag::Edge& e : roots) visit(e.function.get());
  }

  // Nodes in an order where each comes after every node below it.
  const std::vector<ag::Node*>& bottomUp() const { return order_; }
  // On I's path: some edge below leads to a target.
  bool onInputPath(ag::Node* n) const { return info_.at(n).on_input_path; }
  bool isTargetEdge(const ag::Edge& e) const { return target_edges_.count({e.function.get(), e.input_nr}) > 0; }
  bool reached(ag::Node* n) const { return info_.count(n) > 0; }
  bool hasParamsBelow(ag::Node* n) const { return n && info_.at(n).any_param; }
  const std::vector<uint64_t>& paramsBelow(ag::Node* n) const { return info_.at(n).params; }

 private:
  struct PairHash {
    std::size_t operator()(const std::pair<ag::Node*, uint32_t>& p) const {
      return std::hash<ag::Node*>()(p.first) * 31 + p.second;
    }
  };
  struct Info {
    bool on_input_path = false;
    bool any_param = false;
    std::vector<uint64_t> params;  // bit k: params[k]'s accumulator is at or below
  };
  std::unordered_set<std::pair<ag::Node*, uint32_t>, PairHash> target_edges_;
  std::unordered_map<ag::Node*, std::size_t> param_of_;
  std::unordered_map<ag::Node*, Info> info_;
  std::vector<ag::Node*> order_;
  std::size_t words_ = 0;

  // Iterative post-order: a deep model's graph is deeper than a thread's stack allows.
  void visit(ag::Node* root) {
    if (!root || info_.count(root)) return;
    std::vector<std::pair<ag::Node*, std::size_t>> stack{{root, 0}};
    info_[root];
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      const auto& edges = n->next_edges();
      if (next < edges.size()) {
        ag::Node* child = edges[next++].function.get();
        if (child && info_.emplace(child, Info{}).second) stack.emplace_back(child, 0);
        continue;
      }
      finish(n);
      order_.push_back(n);
      stack.pop_back();
    }
  }

  void finish(ag::Node* n) {
    Info& info = info_.at(n);
    info.params.assign(words_, 0);
    if (auto p = param_of_.find(n); p != param_of_.end()) {
      info.params[p->second / 64] |= uint64_t{1} << (p->second % 64);
      info.any_param = true;
    }
    for (const ag::Edge& e : n->next_edges()) {
      if (!e.function) continue;
      const Info& below = info_.at(e.function.get());
      info.on_input_path = info.on_input_path || isTargetEdge(e) || below.on_input_path;
      info.any_param = info.any_param || below.any_param;
      for (std::size_t w = 0; w < words_; ++w) info.params[w] |= below.params[w];
    }
  }
};

bool intersects(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  for (std::size_t w = 0; w < a.size(); ++w)
    if (a[w] & b[w]) return true;
  return false;
}

void orInto(std::vector<uint64_t>& into, const std::vector<uint64_t>& from) {
  for (std::size_t w = 0; w < into.size(); ++w) into[w] |= from[w];
}

ag::Edge edgeOf(const torch::Tensor& t, const std::string& what, std::size_t k) {
  ag::Edge e = torch::autograd::impl::gradient_edge(t);
  if (!e.function)
    throw std::invalid_argument("split backward: " + what + " " + std::to_string(k) +
                                " does not require grad and has no grad_fn");
  return e;
}

// Parameters joined into groups: those whose branches share an operation.
struct UnionFind {
  std::vector<std::size_t> parent;
  explicit UnionFind(std::size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  std::size_t find(std::size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }
  void join(std::size_t a, std::size_t b) { parent[find(a)] = find(b); }
};

std::vector<std::size_t> bitsOf(const std::vector<uint64_t>& bits) {
  std::vector<std::size_t> out;
  for (std::size_t w = 0; w < bits.size(); ++w)
    for (uint64_t b = bits[w]; b; b &= b - 1) out.push_back(w * 64 + __builtin_ctzll(b));
  return out;
}

// Where W starts (NOTE(split-backward)): a node whose incoming gradient I knows (on I's
// path, a root, or a target's node) with parameters below. On I's path, its branch edges
// are those off the path to nodes I does not know; the others ("through") lead where I
// has already sent its gradient, so its call must not reach their parameters. Off I's
// path, I never ran it: every edge is a branch.
struct Start {
  ag::Node* node;
  std::vector<uint64_t> branch_params, through_params;  // bit k: parameter k is below
};

std::vector<Start> findStarts(const GraphFacts& graph, const std::unordered_set<ag::Node*>& root_or_target) {
  std::vector<Start> starts;
  for (ag::Node* n : graph.bottomUp()) {
    const bool on_path = graph.onInputPath(n);
    if (!graph.hasParamsBelow(n) || !(on_path || root_or_target.count(n))) continue;
    const std::size_t words = graph.paramsBelow(n).size();
    Start s{n, std::vector<uint64_t>(words, 0), std::vector<uint64_t>(words, 0)};
    bool any = false;
    for (const ag::Edge& e : n->next_edges()) {
      ag::Node* child = e.function.get();
      if (!graph.hasParamsBelow(child)) continue;
      const bool branch = !on_path || !(graph.onInputPath(child) || graph.isTargetEdge(e) || root_or_target.count(child));
      orInto(branch ? s.branch_params : s.through_params, graph.paramsBelow(child));
      any = any || branch;
    }
    if (any) starts.push_back(std::move(s));
  }
  return starts;
}

// The starts whose branches share parameters, with those parameters: one engine call of W.
struct Group {
  std::vector<const Start*> members;
  std::vector<std::size_t> params;
};

// The groups W can start at their kept gradients: none of whose parameters is also below
// a "through" edge, where I's gradient already includes the branch's share.
std::vector<Group> safeGroups(const std::vector<Start>& starts, std::size_t param_count) {
  UnionFind joined(param_count);
  for (const Start& s : starts) {
    const std::vector<std::size_t> bits = bitsOf(s.branch_params);
    for (std::size_t b = 1; b < bits.size(); ++b) joined.join(bits[0], bits[b]);
  }
  std::map<std::size_t, std::vector<const Start*>> by_group;
  for (const Start& s : starts) by_group[joined.find(bitsOf(s.branch_params).front())].push_back(&s);
  std::vector<Group> safe;
  for (auto& [representative, members] : by_group) {
    std::vector<uint64_t> params(members.front()->branch_params.size(), 0), through(params.size(), 0);
    for (const Start* s : members) {
      orInto(params, s->branch_params);
      orInto(through, s->through_params);
    }
    if (intersects(params, through)) continue;  // a weight used twice along I's path
    safe.push_back({members, bitsOf(params)});
  }
  return safe;
}

}  // namespace

std::vector<torch::Tensor> SplitBackward::inputPass(const std::vector<torch::Tensor>& roots,
                                                    const std::vector<torch::Tensor>& root_grads,
                                                    const std::vector<torch::Tensor>& targets,
                                                    const std::vector<torch::Tensor>& params) {
  calls_.clear();
  param_count_ = params.size();
  std::vector<ag::Edge> root_edges, target_edges, param_edges;
  for (std::size_t k = 0; k < roots.size(); ++k) root_edges.push_back(edgeOf(roots[k], "root", k));
  std::vector<std::size_t> target_slot;  // per target edge: its index in `targets`
  for (std::size_t k = 0; k < targets.size(); ++k)
    if (targets[k].requires_grad()) {
      target_edges.push_back(edgeOf(targets[k], "target", k));
      target_slot.push_back(k);
    }
  std::vector<std::size_t> param_slot;
  std::unordered_set<ag::Node*> seen;  // a parameter listed twice gets its gradient once
  for (std::size_t k = 0; k < params.size(); ++k) {
    if (!params[k].requires_grad()) continue;
    ag::Edge edge = edgeOf(params[k], "parameter", k);
    if (!seen.insert(edge.function.get()).second) continue;
    param_edges.push_back(std::move(edge));
    param_slot.push_back(k);
  }
  const GraphFacts graph(root_edges, target_edges, param_edges);

  std::unordered_set<ag::Node*> root_or_target;
  for (const ag::Edge& e : root_edges) root_or_target.insert(e.function.get());
  for (const ag::Edge& e : target_edges) root_or_target.insert(e.function.get());
  const std::vector<Start> starts = findStarts(graph, root_or_target);
  const std::vector<Group> safe = safeGroups(starts, param_edges.size());
  std::vector<char> from_roots(param_edges.size(), 1);  // unless a safe group covers it
  for (const Group& g : safe)
    for (std::size_t b : g.params) from_roots[b] = 0;

  // I: the targets' gradients, and every slot of every start, in one engine call.
  std::vector<ag::Edge> outputs = target_edges;
  for (const Group& g : safe)
    for (const Start* s : g.members)
      for (uint32_t slot = 0; slot < s->node->num_inputs(); ++slot) outputs.emplace_back(s->node->getptr(), slot);
  std::vector<torch::Tensor> captured;
  if (!outputs.empty())
    captured = torch::autograd::Engine::get_default_engine().execute(
        root_edges, root_grads, /*keep_graph=*/true, /*create_graph=*/false, /*accumulate_grad=*/false, outputs);

  std::vector<torch::Tensor> target_grads(targets.size());
  for (std::size_t k = 0; k < target_edges.size(); ++k) target_grads[target_slot[k]] = captured[k];
  std::size_t next = target_edges.size();
  for (const Group& g : safe) {
    Call call;
    for (const Start* s : g.members)
      for (uint32_t slot = 0; slot < s->node->num_inputs(); ++slot, ++next)
        if (captured[next].defined()) {
          call.starts.emplace_back(s->node->getptr(), slot);
          call.grads.push_back(captured[next]);
        }
    for (std::size_t b : g.params) {
      call.params.push_back(param_edges[b]);
      call.param_index.push_back(param_slot[b]);
    }
    if (!call.starts.empty()) calls_.push_back(std::move(call));
  }
  // Later operations first, as one backward pass would run them.
  std::stable_sort(calls_.begin(), calls_.end(), [](const Call& a, const Call& b) {
    const auto last = [](const Call& c) {
      uint64_t m = 0;
      for (const ag::Edge& e : c.starts) m = std::max(m, e.function->sequence_nr());
      return m;
    };
    return last(a) > last(b);
  });
  Call rest;
  rest.from_roots = true;
  for (std::size_t b = 0; b < param_edges.size(); ++b)
    if (from_roots[b] && graph.reached(param_edges[b].function.get())) {
      rest.params.push_back(param_edges[b]);
      rest.param_index.push_back(param_slot[b]);
    }
  if (!rest.params.empty()) {
    rest.starts = root_edges;
    rest.grads = root_grads;
    calls_.push_back(std::move(rest));
    return target_grads;
  }
  // What only I reads goes now: W runs the starts and the branches below them, nothing
  // else (a call from the roots would run I's path again: then everything stays).
  std::unordered_set<ag::Node*> runs_in_w;
  for (const Group& g : safe)
    for (const Start* s : g.members) runs_in_w.insert(s->node);
  for (ag::Node* n : graph.bottomUp())
    if (!runs_in_w.count(n) && (graph.onInputPath(n) || !graph.hasParamsBelow(n))) n->release_variables();
  return target_grads;
}

std::vector<torch::Tensor> SplitBackward::run(bool accumulate) {
  std::vector<torch::Tensor> grads(param_count_);
  auto& engine = torch::autograd::Engine::get_default_engine();
  for (const Call& call : calls_) {
    const std::vector<torch::Tensor> out = engine.execute(call.starts, call.grads, /*keep_graph=*/true,
                                                          /*create_graph=*/false, accumulate, call.params);
    if (!accumulate)
      for (std::size_t k = 0; k < call.params.size(); ++k) grads[call.param_index[k]] = out[k];
  }
  calls_.clear();  // the edges hold the graph's nodes
  return grads;
}

void SplitBackward::weightPass() { run(/*accumulate=*/true); }

std::vector<torch::Tensor> SplitBackward::weightGradients() { return run(/*accumulate=*/false); }

std::size_t SplitBackward::parametersFromRoots() const {
  std::size_t n = 0;
  for (const Call& call : calls_)
    if (call.from_roots) n += call.params.size();
  return n;
}

}  // namespace pipetrain::runtime
