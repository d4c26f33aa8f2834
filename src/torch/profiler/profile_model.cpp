// profileModel(): per-layer forward, input-gradient and weight-gradient times and
// memory, measured at the real batch size. What is measured and why: docs/profiling.md.
#include <algorithm>
#include <chrono>
#include <map>

#include <sys/resource.h>

#include "layer_run.h"
#include "memory_probe.h"
#include "profile_setup.h"
#include "../runtime/core_probe.h"
#include "../runtime/optimizer_state.h"
#include "../runtime/stage_state.h"
#include "pipetrain/plan/profile_shares.h"
#include "pipetrain/torch/profiler.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/stats.h"

namespace pipetrain::profiler {
namespace {

using Clock = std::chrono::steady_clock;
using util::median;

// NOTE(mean-paid): a layer's figure is its mean over the timed passes, not its median. A
// run's throughput is the mean of its steps, the slow ones included, and a median leaves
// those out: over the shares of gpt, the mlp, fmnist-cnn and GPT-2 a layer's mean ran
// 0-7% above its median, and first runs came closer to their predictions (a median
// |error| of 4.1% over 209 first runs against 5.1% over 76 beside them: docs/
// predictions.md, "Per action: what a first run pays that its profile did not"). A pass
// that lost its core for long counts at kSlowPassCap times the median: in a profile of a
// few passes one such pass would price a small layer at several times what a run pays.
constexpr double kSlowPassCap = 3;
double meanPaid(const std::vector<double>& seconds) { return util::cappedMean(seconds, kSlowPassCap); }

// Minor page faults of this process so far: each is memory touched for the first time.
long minorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// NOTE(settling): `warmup` untimed runs (passes over the model), then more until one
// faults in no new page (at most kMaxSettlingRuns more). The first runs touch heap the
// process has not used yet, and on these VMs a weight gradient's page faults cost many
// times its arithmetic. Which runs fault depends on the heap's history, so a fixed
// warm-up count timed a layer with its faults in some profiles and without in others,
// and the planner cut pipelines around the difference (docs/profiling.md, "Page
// faults"). A trained step runs in a settled heap (util::retainFreedMemory), so settled
// runs are what the profile must time. warmup 0 times the first runs as they are.
constexpr int kMaxSettlingRuns = 20;

template <class Run>
void settle(const Run& run, int warmup) {
  for (int i = 0; i < warmup; ++i) run();
  for (int i = 0; warmup > 0 && i < kMaxSettlingRuns; ++i) {
    const long before = minorFaults();
    run();
    if (minorFaults() == before) return;
  }
}

// NOTE(repeats): a profile's cost is its passes, and on a large model each takes long
// (docs/profiling.md, "What `train` pays before it trains"), so `train` times at most
// ProfileOptions::repeats passes but stops after min_repeats once their totals agree
// within `spread` of their median: more passes would move the means by less than the
// machine's own drift between runs. Whether the timed passes are steady enough to stop.
bool steady(const std::vector<double>& pass_seconds, const ProfileOptions& o) {
  if (o.min_repeats < 1 || static_cast<int>(pass_seconds.size()) < o.min_repeats) return false;
  const double mid = median(pass_seconds);
  const auto [low, high] = std::minmax_element(pass_seconds.begin(), pass_seconds.end());
  return *high - *low <= o.spread * mid;
}

// A layer's means over the timed passes (NOTE(mean-paid)).
struct Timings {
  double forward = 0, input = 0, weight = 0;
  double forward_no_grad = 0;  // without a graph, as a recomputing stage's F (graph::Layer::forward_no_grad_seconds)
  double split_weight = 0;  // the parameters-only backward after I (graph::Layer::split_weight_seconds)
  double step = 0;          // the optimizer step and the clearing of gradients (0 without weights)
  graph::WeightVersionSeconds versions;  // NOTE(weight-versions)
};

// The optimizer steps of a training step, on the layers' own weights and gradients: one
// optimizer per layer with weights (nullptr for the others), the trainer's (Adam, fused
// on a GPU, or SGD with momentum: runtime::makeOptimizer), each parameter's gradient lent
// the running sum its backward passes add into, as autograd adds into .grad. A step's
// working set is then a rank's: the weights, their gradients and the optimizer state;
// copies of the weights would add theirs to the passes and slow them (docs/profiling.md,
// "Passes in a step's order"). The learning rate is 0: each step reads and writes every
// weight as training does (x - 0 * y), and leaves it as it was. The destructor gives the
// parameters their gradients back. The profile times the step of the optimizer the run
// will use (SGD with its default momentum: the buffer's update costs as much at any
// momentum above 0).
recipe::OptimizerOptions optimizerOptions(const std::string& name) {
  recipe::OptimizerOptions o;
  o.name = name;
  return o;
}

class LayerSteps {
 public:
  LayerSteps(std::vector<LayerRun>& runs, const std::string& optimizer) {
    for (LayerRun& run : runs) {
      sums_.emplace_back();
      for (std::size_t k = 0; k < run.params.size(); ++k) {
        torch::Tensor& p = run.params[k];
        lent_.emplace_back(p, p.grad());
        if (!run.grad_sums[k].defined()) run.grad_sums[k] = torch::zeros_like(p);
        sums_.back().emplace_back(p, run.grad_sums[k]);
      }
      optimizers_.push_back(run.params.empty() ? nullptr
                                               : runtime::makeOptimizer(optimizerOptions(optimizer), 0.0, run.params));
    }
  }
  ~LayerSteps() {  // last lent first: a parameter two layers share gets its own gradient back
    for (auto it = lent_.rbegin(); it != lent_.rend(); ++it) it->first.mutable_grad() = it->second;
  }
  LayerSteps(const LayerSteps&) = delete;
  LayerSteps& operator=(const LayerSteps&) = delete;

  bool has(std::size_t layer) const { return optimizers_[layer] != nullptr; }
  // The executor's STEP: the optimizer's step, then the gradients cleared, which since
  // LibTorch 2.0 sets them to none. So each step is lent the sums anew: lent once, every
  // step after the first found no gradient and skipped every parameter, and the profile
  // priced the step at next to nothing (docs/profiling.md, "A profiler bug found on the way").
  void step(std::size_t layer) {
    for (auto& [param, sum] : sums_[layer]) param.mutable_grad() = sum;
    optimizers_[layer]->step();
    optimizers_[layer]->zero_grad();
  }

 private:
  std::vector<std::pair<torch::Tensor, torch::Tensor>> lent_;  // (parameter, its own gradient)
  std::vector<std::vector<std::pair<torch::Tensor, torch::Tensor>>> sums_;  // per layer: (parameter, its sum)
  std::vector<std::unique_ptr<torch::optim::Optimizer>> optimizers_;
};

double loadingSeconds(const torch::Device& device, const ProfileOptions& o) {
  if (!o.load_batch) return 0;
  o.load_batch();  // the first load touches memory and files the timed ones reuse
  std::vector<double> seconds;
  for (int i = 0; i < o.repeats; ++i) seconds.push_back(secondsOf(device, o.load_batch));
  return meanPaid(seconds);
}

// NOTE(loss): the last stage computes each micro-batch's loss inside its forward pass
// (summed for the log, read once per mini-batch), and its backward pass starts from that
// loss, not from the model's output. A profile that seeded the output's backward with
// ones missed that work, small at a vocabulary of hundreds and a large part of the last
// stage at GPT-2's 50,257 (docs/profiling.md, "The loss"). So the layer whose output is
// the model's computes the loss on typical labels (NOTE(typical-input)) within its timed
// forward pass, and its backward passes start from it. Its memory is measured so too:
// what the loss keeps for its backward pass (the fp32 log-probabilities of every
// position, under bf16 as well) is the last stage's.
struct OutputLoss {
  int layer = -1;        // the index in `runs` of the layer whose output is the model's, or -1
  torch::Tensor labels;  // what the loss compares that output with
};

// NOTE(pass-order): layers are timed in the order a training step runs them: every
// layer's forward pass, then every layer's backward pass from the last layer to the
// first, then every layer's optimizer step, `repeats` times; each figure is a mean over
// the passes (NOTE(mean-paid)). Timing one layer over and over kept its weights,
// gradients and activations in cache, which a step does not: there the whole model's
// working set streams through between two visits of a layer, and the layer ran slower
// than timed alone. The optimizer steps are timed in the same passes, after the backward
// passes (LayerSteps), and not in passes of their own: between two steps a training step
// streams the forward and backward passes through the caches, and steps timed alone ran
// warmer than trained (docs/profiling.md, "Passes in a step's order" and "Caches").
//
// NOTE(weight-gradient): W is the mean full backward (input and parameters) minus the
// mean input-only backward, clamped at zero, not a parameters-only backward timed on
// its own. Inside a multi-op layer the weight gradient of an early op needs the
// activation gradients of every later op; a parameters-only backward recomputes that
// chain, which the input-only backward has already paid for. A split schedule (ZB-H1)
// runs the chain in I and only the weight products in W, and a non-split schedule runs
// B = I + W, so full - I is what W adds and I + W stays the whole backward pass. The full
// pass includes adding the weight gradients into their running sums (backwardAccumulating).
// pipetrain's executor runs a split schedule's I and W as runtime::SplitBackward does
// (NOTE(split-backward)), and so does the split pass here: that W is timed too, after I,
// as split_weight_seconds, which the simulator gives a W action. It used to re-run each
// layer's own operations from the layer's output gradient, which for a transformer block
// cost far more than full - I (docs/profiling.md, "Why W is full − I").
//
// NOTE(in-flight): a pipeline's rank holds several micro-batches between their forward
// and backward passes (1F1B: p - r on rank r), and their activations stream through the
// caches in between: a share timed with one micro-batch in flight ran faster than the
// run where activations outweigh weights (bench/profile_vs_run.sh; docs/profiling.md,
// "Profiled as a rank runs"). `train` gives each share what the schedule's rank holds at
// its peak (plan::profileInFlight): P - K under 1F1B, all m (at most 8) under GPipe.
//
// NOTE(backward-passes): B, I and W are timed in passes of their own kind, not one after
// another on the same layer: a whole-backward pass (every forward, then B per layer) and
// a split pass (every forward, then I per layer, then W per layer, as ZB's deferred W),
// alternating. Run back to back on one layer, the third of them found the layer's
// activations and weights in cache where training does not, and training ran slower
// than profiled (bench/profile_vs_run.sh; docs/profiling.md, "Backward passes of their
// own kind").
//
// NOTE(weight-versions): schedules that keep several versions of a stage's weights make
// the executor copy them besides computing: 2BW's and PipeDream's stashed version is
// swapped into the parameters around every pass that reads it and copied aside at the
// STEP, and PipeMare's T2 computes w - tau x velocity and swaps it in around a backward
// pass (runtime/stage_state.h). Unpriced, gpt's F, B and STEP under 2BW ran 10-12%,
// 8-10% and 20-27% above 1F1B's on the same plan (docs/predictions.md, "Per action:
// what a first run pays that its profile did not"). So after the timed passes, as many
// times as they ran, each layer's weights go through those very functions: a copy, the
// swap in and the swap back, and a correction into the copy. Not inside the passes:
// copies timed there put their bytes in the way of the passes' own (docs/profiling.md,
// "Passes in a step's order").
//
// NOTE(backward-call): every B, I and W above is a call into autograd's engine of its
// own, one per layer, and a call costs a fixed time beyond the work it runs (its graph
// task, its ready queue): 4 us on this project's CPU, where a small layer's whole
// backward pass takes 5-30. A stage runs all its layers' in one call per action, so a
// stage of the byo example's 7 small layers was priced 6 calls above its run
// (docs/predictions.md, "One engine call per action"). The call is timed apart, after
// the passes (backwardCallSeconds), taken off each layer's B, I and W, and kept in the
// graph, whose cost model adds it once per action (graph::LayerGraph::backwardCallSeconds).
// `loading_layer`: the index in `runs` of the layer whose forward time includes loading
// the batch (NOTE(input-loading)), or -1; `loss`: the layer that computes the loss
// (NOTE(loss)).
struct LayerTimes {
  std::vector<Timings> layers;       // net of the backward call
  double probe_seconds = 0;          // the core's speed meanwhile (runtime/core_probe.h); 0 off the CPU
  double backward_call_seconds = 0;  // NOTE(backward-call); 0 off the CPU
};

// What a call into autograd's engine costs beyond its work (NOTE(backward-call)): the
// calls differ only in the work they run, one multiplication's backward or two, so
// 2 x t(one) - t(two) leaves the call. Medians of many calls, alternated, after some
// untimed ones.
double backwardCallSeconds() {
  constexpr int kUntimed = 20, kTimed = 200;
  const torch::Tensor x = torch::ones({1}, torch::requires_grad());
  const torch::Tensor seed = torch::ones({1});
  const auto call = [&](int multiplications) {
    torch::Tensor y = x;
    for (int k = 0; k < multiplications; ++k) y = y * 2;
    return secondsOf(torch::kCPU, [&] { torch::autograd::grad({y}, {x}, {seed}); });
  };
  std::vector<double> one, two;
  for (int i = 0; i < kUntimed + kTimed; ++i) {
    const double t1 = call(1), t2 = call(2);
    if (i < kUntimed) continue;
    one.push_back(t1);
    two.push_back(t2);
  }
  return std::max(0.0, 2 * median(one) - median(two));
}

LayerTimes timeLayers(std::vector<LayerRun>& runs, const torch::Device& device, const ProfileOptions& o,
                      int loading_layer, const OutputLoss& loss) {
  const std::size_t n = runs.size();
  LayerSteps steps(runs, o.optimizer);
  std::vector<std::vector<double>> forward(n), forward_no_grad(n), input(n), split_weight(n), full(n), step(n);
  std::vector<std::vector<double>> swap(n), stash(n), correction(n);
  // A pass of a whole-backward step (`split` false: B per layer) or of a split one (I per
  // layer, then W per layer), each as training runs it (NOTE(backward-passes)).
  // Every pass holds o.in_flight micro-batches' activations between their forward and
  // backward passes (NOTE(in-flight)); they are the same batch, in separate tensors.
  const std::size_t k = static_cast<std::size_t>(o.in_flight);
  const auto pass = [&](bool split, bool timed) {
    if (!split)  // one micro-batch's forward pass without a graph, as a recomputing stage's F runs it
      for (std::size_t l = 0; l < n; ++l) {
        const double f = secondsOf(device, [&] {
          torch::NoGradGuard no_grad;
          torch::Tensor output = runs[l].forward();
          if (static_cast<int>(l) == loss.layer) runs[l].loss(output, loss.labels).item<double>();
        });
        if (timed) forward_no_grad[l].push_back(f);
      }
    std::vector<std::vector<torch::Tensor>> outputs(k, std::vector<torch::Tensor>(n));  // [micro-batch][layer]
    for (auto& mb : outputs)
      for (std::size_t l = 0; l < n; ++l) {
        const double f = secondsOf(device, [&] {
          mb[l] = runs[l].forward();
          if (static_cast<int>(l) == loss.layer) {
            mb[l] = runs[l].loss(mb[l], loss.labels);
            mb[l].item<double>();  // the loss's value, as the log's sum needs it
          }
        });
        if (timed) forward[l].push_back(f);
      }
    std::vector<std::vector<runtime::SplitBackward>> splits(split ? k : 0, std::vector<runtime::SplitBackward>(n));
    for (std::size_t j = 0; j < k; ++j)
      for (std::size_t l = n; l-- > 0;) {
        const torch::Tensor seed = torch::ones_like(outputs[j][l]);
        if (!split) {
          const double b = secondsOf(device, [&] { runs[l].backwardAccumulating(outputs[j][l], seed); });
          if (timed) full[l].push_back(b);
        } else {
          const double i = secondsOf(device, [&] { runs[l].inputBackward(splits[j][l], outputs[j][l], seed); });
          if (timed && runs[l].input_grad) input[l].push_back(i);
        }
        outputs[j][l] = torch::Tensor();  // a full pass's graph is spent; a split one's lives in `splits`
      }
    if (split)
      for (auto& mb : splits)
        for (std::size_t l = n; l-- > 0;) {
          const double w = secondsOf(device, [&] { runs[l].weightBackwardAccumulating(mb[l]); });
          if (timed && !runs[l].params.empty()) split_weight[l].push_back(w);
        }
    for (std::size_t l = 0; l < n; ++l) {
      if (!steps.has(l)) continue;
      const double t = secondsOf(device, [&] { steps.step(l); });
      if (timed) step[l].push_back(t);
    }
  };
  // NOTE(weight-versions)
  const auto copyVersions = [&] {
    for (std::size_t l = 0; l < n; ++l) {
      const std::vector<torch::Tensor>& weights = runs[l].params;
      if (weights.empty()) continue;
      std::vector<torch::Tensor> other, velocity;
      stash[l].push_back(secondsOf(device, [&] { other = runtime::stashCopy(weights); }));
      for (int k = 0; k < 2; ++k) swap[l].push_back(secondsOf(device, [&] { runtime::swapVersions(weights, other); }));
      for (const torch::Tensor& w : weights) velocity.push_back(torch::zeros_like(w));
      correction[l].push_back(secondsOf(device, [&] { runtime::correctWeights(other, weights, velocity, 1); }));
    }
  };
  const auto started = Clock::now();
  int passes = 0, timed_passes = 0;
  bool done = false;  // timing, that is: later passes only keep the other shares company
  std::vector<double> pass_seconds;  // the timed passes'
  std::vector<double> probes;
  const auto both = [&](bool timed) {
    double seconds = 0;
    for (const bool split : {false, true}) {
      const auto start = Clock::now();
      pass(split, timed);
      seconds += std::chrono::duration<double>(Clock::now() - start).count();
      if (timed && device.is_cpu()) probes.push_back(runtime::coreProbeSeconds());  // NOTE(core-probe)
    }
    ++passes;
    if (timed) {
      ++timed_passes;
      pass_seconds.push_back(seconds);
    }
    if (o.progress && !done) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
      const int planned = timed_passes > 0 || passes >= o.warmup ? o.repeats - timed_passes : o.warmup - passes + o.repeats;
      o.progress({timed_passes > 0, passes, timed_passes, o.repeats, elapsed, planned * elapsed / passes});
    }
  };
  settle([&] { both(false); }, o.warmup);
  if (o.rendezvous) o.rendezvous->readyToTime();
  for (int rep = 0; rep < o.repeats && !steady(pass_seconds, o); ++rep) both(true);
  for (int rep = 0; rep < timed_passes; ++rep) copyVersions();
  const double loading = loading_layer >= 0 ? loadingSeconds(device, o) : 0.0;  // while the other shares time too
  done = true;
  if (o.rendezvous) {
    o.rendezvous->doneTiming();
    while (o.rendezvous->othersTiming()) both(false);
  }
  LayerTimes times;
  times.probe_seconds = probes.empty() ? 0.0 : median(probes);
  times.backward_call_seconds = device.is_cpu() ? backwardCallSeconds() : 0.0;
  // A backward figure net of its call (NOTE(backward-call)); 0 where nothing was timed.
  const auto net = [&](const std::vector<double>& seconds) {
    return seconds.empty() ? 0.0 : std::max(0.0, meanPaid(seconds) - times.backward_call_seconds);
  };
  std::vector<Timings>& t = times.layers;
  t.resize(n);  // a part the layer does not have was never timed: its mean is 0
  for (std::size_t l = 0; l < n; ++l) {
    t[l].forward = meanPaid(forward[l]);
    t[l].forward_no_grad = meanPaid(forward_no_grad[l]);
    t[l].input = net(input[l]);
    t[l].weight = runs[l].params.empty() ? 0.0 : std::max(0.0, net(full[l]) - t[l].input);
    t[l].split_weight = net(split_weight[l]);
    t[l].step = meanPaid(step[l]);
    t[l].versions = {meanPaid(swap[l]), meanPaid(stash[l]), meanPaid(correction[l])};
  }
  if (loading_layer >= 0) {
    t[loading_layer].forward += loading;
    t[loading_layer].forward_no_grad += loading;
  }
  return times;
}

}  // namespace

int64_t optimizerStateBytes(const std::string& optimizer, int64_t param_bytes) {
  if (optimizer == "adam" || optimizer == "adamw") return 2 * param_bytes;  // first and second moments
  if (optimizer == "sgd") return param_bytes;                              // the momentum buffer
  throw Error("unknown optimizer '" + optimizer + "' (known: adam, adamw, sgd)");
}

graph::LayerGraph profileModel(const models::Model& model, int64_t batch, const ProfileOptions& o) {
  if (batch < 1) throw Error("profile: the batch size must be at least 1, not " + std::to_string(batch));
  if (o.warmup < 0) throw Error("profile: warm-up runs must be 0 or more, not " + std::to_string(o.warmup));
  if (o.repeats < 1) throw Error("profile: repeats must be at least 1, not " + std::to_string(o.repeats));
  if (o.min_repeats < 0 || o.min_repeats > o.repeats)
    throw Error("profile: the least repeats must lie between 0 and the repeats (" + std::to_string(o.repeats) +
                "), not " + std::to_string(o.min_repeats));
  if (!(o.spread >= 0)) throw Error("profile: the spread must be 0 or more");
  if (o.in_flight < 1)
    throw Error("profile: micro-batches in flight must be at least 1, not " + std::to_string(o.in_flight));
  if (o.shares < 1 || o.share < 0 || o.share >= o.shares)
    throw Error("profile: share " + std::to_string(o.share) + " of " + std::to_string(o.shares) +
                " does not exist (shares are numbered from 0)");
  optimizerStateBytes(o.optimizer, 0);  // an unknown optimizer fails before any work

  models::checkWiring(model);
  ModelStateGuard state(model);
  const torch::Device device = deviceOf(model);
  const int n = static_cast<int>(model.layers.size());
  PreparedLayers prepared = prepareLayers(model, batch, o.precision, device);
  std::vector<LayerRun>& runs = prepared.runs;
  const torch::Tensor& labels = prepared.labels;
  // Only this process's share of the layers is timed (ProfileOptions::share); the others
  // are not touched while it is, so they stay out of the working set.
  std::vector<int64_t> param_bytes;
  for (const models::Layer& layer : model.layers) param_bytes.push_back(models::parameterBytes(layer));
  const ShareLayers mine = shareLayers(model, prepared.signatures, o.share, o.shares, o.time_identical_once);
  const int first = mine.first, end = mine.end;
  const std::vector<int>& slot = mine.slot;
  const int loading = firstInputReader(model);
  std::vector<LayerRun> timed;
  for (int l : mine.timed_layers) timed.push_back(runs[l]);
  const auto slotOf = [&](int l) { return l >= first && l < end ? slot[l] : -1; };
  const LayerTimes times = timeLayers(timed, device, o, slotOf(loading), OutputLoss{slotOf(n - 1), labels});
  std::vector<graph::Layer> nodes;
  for (int l = 0; l < n; ++l) {
    const models::Layer& layer = model.layers[l];
    const Memory m = measureMemory(runs[l], device, l == n - 1 ? labels : torch::Tensor());
    graph::Layer node;
    node.name = layer.name;
    node.kind = layer.kind;
    node.inputs = models::graphInputs(model, l);
    if (l >= first && l < end) {
      const Timings& t = times.layers[slot[l]];
      node.forward_seconds = t.forward;
      node.forward_no_grad_seconds = t.forward_no_grad;
      node.backward_input_seconds = t.input;
      node.backward_weight_seconds = t.weight;
      node.split_weight_seconds = t.split_weight;
      node.optimizer_seconds = t.step;
      node.weight_versions = t.versions;
    }
    node.output_bytes = prepared.output_bytes[l];
    node.saved_activation_bytes = m.saved >= 0 ? m.saved : node.output_bytes;
    node.split_activation_bytes = m.split;
    node.param_bytes = param_bytes[l];
    node.optimizer_state_bytes = optimizerStateBytes(o.optimizer, node.param_bytes);
    node.peak_memory_bytes = m.peak;
    node.split_peak_memory_bytes = m.split_peak;
    node.weight_peak_memory_bytes = m.weight_peak;
    nodes.push_back(std::move(node));
  }
  graph::LayerGraph profile(std::move(nodes), batch, "profile of model '" + model.name + "'");
  profile.setProfiledAs({0, 0, times.probe_seconds});
  profile.setBackwardCallSeconds(times.backward_call_seconds);
  return profile;
}

}  // namespace pipetrain::profiler
