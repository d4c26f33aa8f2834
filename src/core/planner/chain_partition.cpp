#include "pipetrain/planner/chain_partition.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "pipetrain/graph/heap_share.h"
#include "pipetrain/plan/plan_program.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/sim/cost_model.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/text.h"

namespace pipetrain::planner {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Runs of layers with about equal compute: block k ends where the running sum first
// reaches k / blocks of the total. Every block holds at least one layer.
std::vector<int> blockStarts(const graph::LayerGraph& g, int max_blocks) {
  const int n = g.size();
  std::vector<int> starts;
  for (int i = 0; i <= n; ++i) starts.push_back(i);
  if (n <= max_blocks) return starts;
  double total = 0;
  for (const auto& l : g.layers()) total += l.forward_seconds + l.backwardSeconds();
  starts = {0};
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    sum += g.layer(i).forward_seconds + g.layer(i).backwardSeconds();
    const int made = static_cast<int>(starts.size());  // blocks begun so far
    const int layers_left = n - (i + 1);
    const int blocks_left = max_blocks - made;
    const bool quota = total > 0 && sum >= total * made / max_blocks;
    if (i + 1 < n && blocks_left > 0 && (quota || layers_left == blocks_left)) starts.push_back(i + 1);
  }
  starts.push_back(n);
  return starts;
}

}  // namespace

namespace {

// table[k][i] = the min (or max) of values[i .. i + 2^k).
std::vector<std::vector<double>> sparseTable(std::vector<double> values, bool maximum) {
  std::vector<std::vector<double>> table{std::move(values)};
  for (std::size_t width = 1; 2 * width <= table[0].size(); width *= 2) {
    const auto& prev = table.back();
    std::vector<double> next(prev.size() - width);
    for (std::size_t i = 0; i < next.size(); ++i)
      next[i] = maximum ? std::max(prev[i], prev[i + width]) : std::min(prev[i], prev[i + width]);
    table.push_back(std::move(next));
  }
  return table;
}

// Over [first, end), which must be non-empty.
double rangeOf(const std::vector<std::vector<double>>& table, int first, int end, bool maximum) {
  int k = 0;
  while ((2 << k) <= end - first) ++k;
  const double a = table[k][first], b = table[k][end - (1 << k)];
  return maximum ? std::max(a, b) : std::min(a, b);
}

}  // namespace

ChainProblem::ChainProblem(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                           const PartitionOptions& options)
    : graph_(graph), cluster_(cluster), options_(options) {
  traits_ = &schedule::traits(options.schedule);  // throws on an unknown name
  if (graph.size() == 0) throw Error("planner: the layer graph has no layers");
  if (options.microbatch_size < 1) throw Error("planner: the micro-batch size must be at least 1");
  if (options.microbatches < 1) throw Error("planner: the micro-batch count must be at least 1");
  if (options.max_blocks < 1) throw Error("planner: max_blocks must be at least 1");
  devices_ = options.max_devices > 0 ? std::min(options.max_devices, cluster.size()) : cluster.size();
  if (options.copies < 1 || static_cast<int64_t>(options.copies) * devices_ > cluster.size())
    throw Error("planner: " + std::to_string(options.copies) + " copies of a pipeline on " + std::to_string(devices_) +
                " devices need more than the cluster's " + std::to_string(cluster.size()));
  if (options_.assumed_depth < 1) options_.assumed_depth = 1;
  extra_weight_buffers_ = options.extra_weight_buffers;
  scale_ = static_cast<double>(options.microbatch_size) / graph.batchSize();
  for (const graph::Layer& l : graph.layers()) {
    // Under a split schedule, I's or W's (beyond the weight gradients, priced apart).
    const double split = std::max(l.inputBackwardTransientAt(scale_),
                                  l.weightPassPeakAt(scale_) - static_cast<double>(l.param_bytes));
    backward_transient_ = std::max(backward_transient_, traits_->split_backward ? split : l.backwardTransientAt(scale_));
  }

  std::vector<double> speed, memory, hop_allreduce_bandwidth, hop_allreduce_host_bandwidth, hop_latency, copy,
      hop_through_host;
  for (int d = 0; d < devices_; ++d) {
    speed.push_back(cluster.device(d).speed);
    // What the process holds beside its stage's tensors is not the stage's to use (the
    // dataset, held by the first and last stages only, is left to the simulator's check),
    // nor, on a CPU, what the heap keeps freed beside them.
    memory.push_back(graph::tensorsFitting(
        static_cast<double>(cluster.device(d).memory_bytes - graph.processMemory().framework_bytes),
        cluster.device(d).kind, graph.processMemory().heap));
    copy.push_back(cluster::allreduceCopySecondsPerByte(cluster.device(d)));
    if (d + 1 < devices_) {
      const auto hop = cluster.route(d, d + 1);
      hop_allreduce_bandwidth.push_back(hop.allreduce_bandwidth);
      hop_allreduce_host_bandwidth.push_back(hop.allreduce_host_bandwidth);
      hop_latency.push_back(hop.allreduceLatency());  // only the ring uses it
      hop_through_host.push_back(hop.through_host ? 1 : 0);
      hop_.push_back(hop);
      hop_host_costs_ |= !cluster::endsFree(hop);
    }
  }
  min_speed_ = sparseTable(std::move(speed), false);
  min_memory_ = sparseTable(std::move(memory), false);
  max_allreduce_copy_ = sparseTable(std::move(copy), true);
  if (devices_ > 1) {
    min_hop_allreduce_bandwidth_ = sparseTable(std::move(hop_allreduce_bandwidth), false);
    min_hop_allreduce_host_bandwidth_ = sparseTable(std::move(hop_allreduce_host_bandwidth), false);
    max_hop_latency_ = sparseTable(std::move(hop_latency), true);
    any_hop_through_host_ = sparseTable(std::move(hop_through_host), true);
  }

  // LayerGraph keeps its layers in topological order: blocks are runs of that order.
  block_start_ = blockStarts(graph, options.max_blocks);
  const int n = numBlocks();
  std::vector<int> block_of(graph.size());
  for (int b = 0; b < n; ++b)
    for (int i = block_start_[b]; i < block_start_[b + 1]; ++i) block_of[i] = b;

  prefix_.assign(n + 1, StageSums{});
  cut_bytes_.assign(n + 1, 0.0);
  for (int b = 0; b < n; ++b) {
    prefix_[b + 1] = prefix_[b];
    for (int i = block_start_[b]; i < block_start_[b + 1]; ++i) prefix_[b + 1] += layerSums(i);
  }
  // An output crosses every cut between its producer's block and its last consumer's.
  std::vector<double> delta(n + 1, 0.0);
  for (int l = 0; l < graph.size(); ++l) {
    int last = block_of[l];
    for (int c : graph.successors(l)) last = std::max(last, block_of[c]);
    if (last == block_of[l]) continue;
    const double bytes = outputBytes(l);
    delta[block_of[l] + 1] += bytes;
    delta[last + 1] -= bytes;
  }
  double running = 0;
  for (int b = 0; b <= n; ++b) cut_bytes_[b] = running += delta[b];
}

std::vector<int> ChainProblem::layersOf(int first_block, int end_block) const {
  std::vector<int> layers;
  for (int l = block_start_[first_block]; l < block_start_[end_block]; ++l) layers.push_back(l);
  return layers;
}

bool ChainProblem::allowedDevices(int first, int end) const {
  if (first < 0 || end > devices_ || end <= first) return false;
  const auto& levels = cluster_.levels();
  if (end - first == 1 || levels.empty()) return end - first == 1;
  if ((end - 1) / levels[0].group_size == first / levels[0].group_size) return true;
  // Whole groups of level l - 1 inside one group of level l (the top level holds all).
  for (std::size_t l = 1; l < levels.size(); ++l) {
    const int unit = levels[l - 1].group_size;
    const bool same_group = l + 1 == levels.size() || (end - 1) / levels[l].group_size == first / levels[l].group_size;
    if (same_group) return first % unit == 0 && end % unit == 0;
  }
  return false;
}

std::vector<int> ChainProblem::allowedStarts(int end) const { return starts(end, false); }

std::vector<int> ChainProblem::usefulStarts(int end) const { return starts(end, true); }

bool ChainProblem::replicasUsable(int r) const {
  return schedule::replicasCanSplit(*traits_, options_.microbatches, r) &&
         (options_.max_replicas <= 0 || r <= options_.max_replicas);
}

std::vector<int> ChainProblem::starts(int end, bool useful_only) const {
  // Replica counts that cannot be a stage are left out before sorting: on 8192 devices
  // in nodes of 8, a stage of whole nodes may start at any of end / 8 devices.
  auto keep = [&](int d0) { return !useful_only || replicasUsable(end - d0); };
  std::vector<int> candidates{end - 1};
  const auto& levels = cluster_.levels();
  if (!levels.empty()) {
    // Inside the level-0 group of the last device, or whole groups of level l - 1 inside
    // one group of level l: the only shapes allowedDevices() accepts.
    const int g0 = levels[0].group_size;
    for (int d0 = (end - 1) / g0 * g0; d0 < end - 1; ++d0)
      if (keep(d0)) candidates.push_back(d0);
    for (std::size_t l = 1; l < levels.size(); ++l) {
      const int unit = levels[l - 1].group_size;
      if (end % unit != 0) continue;
      const int group_start = l + 1 == levels.size() ? 0 : (end - 1) / levels[l].group_size * levels[l].group_size;
      for (int d0 = group_start; d0 <= end - unit; d0 += unit)
        if (keep(d0)) candidates.push_back(d0);
    }
  }
  std::sort(candidates.begin(), candidates.end(), std::greater<int>());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  std::vector<int> starts;
  int fewest_share = options_.microbatches + 1;
  for (int d0 : candidates) {  // fewest replicas first
    if (!allowedDevices(d0, end)) continue;
    if (useful_only && !options_.use_all_devices) {
      // More replicas for the same busiest share compute no faster, all-reduce over more
      // devices and leave fewer to the stages before: the DP keeps the fewest (at most
      // 2 sqrt(m) shares; refinement may still try more replicas). Not when every device
      // must be used: the extra replicas may be the only way to fill them.
      const int share = schedule::busiestReplicaShare(options_.microbatches, end - d0);
      if (share >= fewest_share) continue;
      fewest_share = share;
    }
    starts.push_back(d0);
  }
  return starts;
}

Recompute recomputeFromName(const std::string& name) {
  if (name == "none") return Recompute::kNone;
  if (name == "full") return Recompute::kFull;
  if (name == "auto") return Recompute::kAuto;
  throw Error("unknown recomputation '" + name + "' (known: none, full, auto)");
}

StageSums ChainProblem::layerSums(int layer) const {
  const graph::Layer& l = graph_.layer(layer);
  const graph::PassSeconds t = graph_.secondsAt(layer, options_.microbatch_size);
  StageSums sums;
  sums.compute = t.forwardBackward();
  sums.backward = t.backward_input + t.backward_weight;
  sums.step = l.optimizer_seconds;
  // Under a split schedule a micro-batch holds one or the other (before and after its
  // I); the larger of each layer's bounds the stage's.
  const double saved = l.savedBytesAt(scale_);
  sums.activation =
      traits_->split_backward ? std::max(saved, static_cast<double>(l.splitActivationBytes()) * scale_) : saved;
  sums.params = static_cast<double>(l.param_bytes);
  sums.optimizer = static_cast<double>(l.optimizer_state_bytes);
  sums.forward = t.forward_no_grad;
  sums.split = traits_->split_backward ? static_cast<double>(l.splitActivationBytes()) * scale_ : 0.0;
  if (traits_->split_backward)
    sums.kept_gradients = std::max(0.0, l.inputPassKeptBytesAt(scale_));
  return sums;
}

StageSums ChainProblem::sumsOf(const std::vector<int>& layers) const {
  StageSums sums;
  for (int l : layers) sums += layerSums(l);
  return sums;
}

double ChainProblem::stageMemoryBytes(int first_block, int end_block, int replicas, bool recompute) const {
  return stageMemoryBytes(rangeSums(first_block, end_block), replicas, options_.assumed_depth, recompute);
}

double ChainProblem::stageMemoryBytes(const StageSums& stage, int replicas, int depth, bool recompute) const {
  // Every replica runs the stage's order over its own share of the micro-batches.
  const schedule::ScheduleKind kind = traits_->kind;
  const int share = schedule::busiestReplicaShare(options_.microbatches, replicas);
  const int inflight = schedule::inflightMicrobatchesBound(kind, depth, share);
  return memoryBytes(stage, inflight, schedule::weightCopiesBound(kind, inflight, extra_weight_buffers_), recompute);
}

double ChainProblem::stageMemoryBytes(const StageSums& stage, const DeviceBlock& devices, bool recompute) const {
  return memoryBytes(stage, devices.inflight, devices.weight_copies, recompute);
}

double ChainProblem::memoryBytes(const StageSums& stage, int inflight, double weight_copies, bool recompute) const {
  // One micro-batch at a time is inside its backward pass.
  const double fixed = stage.params * weight_copies + stage.optimizer + stage.kept_gradients + backward_transient_;
  if (!recompute || stage.kept < 0) return fixed + stage.activation * inflight;
  // Each micro-batch in flight keeps its messages (or, between a split schedule's I and
  // W, what W reads); the one being recomputed holds all its activations.
  return fixed + std::max(stage.kept, stage.split) * inflight + stage.activation;
}

DeviceBlock ChainProblem::deviceBlock(int first, int end) const {
  DeviceBlock b{first, end, kInfinity, kInfinity, kInfinity, 0.0};
  b.speed = rangeOf(min_speed_, first, end, false);
  b.memory_bytes = rangeOf(min_memory_, first, end, false);
  const int r = end - first;
  b.usable = replicasUsable(r);
  b.share = schedule::busiestReplicaShare(options_.microbatches, r);
  // Every replica steps its whole share of the weights once per mini-batch, or after
  // each of its micro-batches under PipeDream (1F1B-RR: replicas all-reduce every round).
  b.steps = traits_->step_rule == schedule::StepRule::kPerMicrobatch ? b.share : 1;
  // stageMemoryBytes()'s terms that depend on the block alone, priced once: the DP asks
  // for every stage it tries.
  b.inflight = schedule::inflightMicrobatchesBound(traits_->kind, options_.assumed_depth,
                                                    schedule::busiestReplicaShare(options_.microbatches, r));
  b.weight_copies = schedule::weightCopiesBound(traits_->kind, b.inflight, extra_weight_buffers_);
  const int copies = options_.copies, ring = r * copies;
  if (ring < 2) return b;
  // The ring: hops d -> d + 1 inside the block, and the last device back to the first;
  // with copies, from each device to its replica in the next copy, and from the last
  // copy back to the first (the order replicatePipeline lists them in).
  bool through_host = r > 1 && rangeOf(any_hop_through_host_, first, end - 1, true) > 0;
  if (r > 1) {
    b.ring_bandwidth = rangeOf(min_hop_allreduce_bandwidth_, first, end - 1, false);
    b.ring_host_bandwidth = rangeOf(min_hop_allreduce_host_bandwidth_, first, end - 1, false);
    b.ring_latency = rangeOf(max_hop_latency_, first, end - 1, true);
  }
  // Without a container: the DP prices a block for every range of devices it tries.
  const auto join = [&](const cluster::Route& hop) {
    b.ring_bandwidth = std::min(b.ring_bandwidth, hop.allreduce_bandwidth);
    b.ring_host_bandwidth = std::min(b.ring_host_bandwidth, hop.allreduce_host_bandwidth);
    b.ring_latency = std::max(b.ring_latency, hop.allreduceLatency());
    through_host |= hop.through_host;
  };
  join(cluster_.route(end - 1 + (copies - 1) * devices_, first));
  if (copies > 1) join(cluster_.route(first, first + devices_));
  // The simulator's formulas (sim/cost_model.h), linear in the bytes.
  b.ring_seconds = sim::ringAllreduceSeconds(0, ring, b.ring_bandwidth, b.ring_latency);
  b.ring_seconds_per_byte = sim::ringAllreduceSeconds(1, ring, b.ring_bandwidth, 0);
  b.ring_host_seconds_per_byte = sim::ringAllreduceHostSeconds(1, ring, b.ring_host_bandwidth);
  if (through_host)
    b.ring_host_seconds_per_byte += rangeOf(max_allreduce_copy_, first, end, true);  // as CostModel::ringAllreduceOf
  return b;
}

double ChainProblem::stageSeconds(int i, int j, const DeviceBlock& devices) const {
  const StageSums sums = rangeSums(i, j);
  bool recompute = recomputesAll();
  if (options_.check_memory && devices.usable) {
    // The DP asks for every stage it tries: one memory figure where the stage fits as it is.
    double need = stageMemoryBytes(sums, devices, recompute);
    if (need > devices.memory_bytes && options_.recompute == Recompute::kAuto) {
      recompute = true;  // it fits only so, if at all
      need = stageMemoryBytes(sums, devices, true);
    }
    if (need > devices.memory_bytes) return kInfinity;
  }
  return stageSeconds(sums, devices, recompute);
}

double ChainProblem::hostSeconds(int i, int j, const DeviceBlock& devices) const {
  if (!hop_host_costs_) return 0;  // most clusters: the DP asks for every stage it tries
  double per_microbatch = 0;  // an activation one way, its gradient the other, per cut
  if (i > 0 && devices.first > 0 && cut_bytes_[i] > 0)
    per_microbatch += 2 * cluster::messageEndSeconds(cluster_.device(devices.first), hop_[devices.first - 1], cut_bytes_[i]);
  if (j < numBlocks() && devices.end < numDevices() && cut_bytes_[j] > 0)
    per_microbatch += 2 * cluster::messageEndSeconds(cluster_.device(devices.end - 1), hop_[devices.end - 1], cut_bytes_[j]);
  if (per_microbatch == 0) return 0;
  return schedule::busiestReplicaShare(options_.microbatches, devices.replicas()) * per_microbatch;
}

double ChainProblem::stageSeconds(const StageSums& stage, const DeviceBlock& devices, bool recompute) const {
  // Replicas take every r-th micro-batch; the busiest one sets the pace.
  if (!devices.usable) return kInfinity;
  const double work = stage.compute + (recompute ? stage.forward : 0.0);
  const double compute = (work * devices.share + stage.step * devices.steps) / devices.speed;
  // Each all-reduce overlaps the backward pass before it from its first full bucket on,
  // but not what it takes of the replicas' cores (as the simulator prices it).
  const double allreduce = devices.ring_seconds + devices.ring_seconds_per_byte * stage.params;
  const double host = devices.ring_host_seconds_per_byte * stage.params;
  const double last_backward = stage.backward / devices.speed * (1 - sim::firstBucketShare(stage.params));
  return compute + devices.steps * std::max(host, allreduce - last_backward);
}

double ChainProblem::boundarySeconds(int block, int device) const {
  if (block == 0 || device == 0) return 0;
  // The hop's route, priced once: the DP asks for every cut of every stage it tries.
  return cut_bytes_[block] > 0 ? options_.microbatches * sim::transferSeconds(cut_bytes_[block], hop_[device - 1]) : 0;
}

double ChainProblem::messagesSeconds(double bytes, int from_device, int to_device) const {
  if (bytes <= 0) return 0;
  return options_.microbatches * sim::transferSeconds(bytes, cluster_.route(from_device, to_device));
}

double ChainProblem::outputBytes(int layer) const { return static_cast<double>(graph_.layer(layer).output_bytes) * scale_; }

double ChainProblem::objective(const std::vector<StageChoice>& stages) const {
  double worst = 0;
  for (const StageChoice& s : stages) {
    const DeviceBlock devices = deviceBlock(s.first_device, s.end_device);
    worst = std::max(worst, stageSeconds(s.first_block, s.end_block, devices) +
                                hostSeconds(s.first_block, s.end_block, devices));
    worst = std::max(worst, boundarySeconds(s.first_block, s.first_device));
  }
  return worst;
}

Partition solveChain(const ChainProblem& problem) {
  const int n = problem.numBlocks(), devices = problem.numDevices();
  // best[d][j]: blocks [0, j) tiling devices [0, d); the last stage begins at
  // (from_block, from_device). One flat table, indexed d * (n + 1) + j: a table of
  // vectors was a fifth of a 1024-device exploration in malloc and page faults.
  const auto at = [n](int d, int j) { return static_cast<std::size_t>(d) * (n + 1) + j; };
  std::vector<double> best(at(devices, n) + 1, kInfinity);
  std::vector<std::pair<int, int>> from(best.size(), {-1, -1});
  best[at(0, 0)] = 0;
  for (int d = 1; d <= devices; ++d)
    for (int d0 : problem.usefulStarts(d)) {
      const DeviceBlock block = problem.deviceBlock(d0, d);
      const double* before = &best[at(d0, 0)];
      for (int j = 1; j <= n; ++j) {
        double& here = best[at(d, j)];
        for (int i = j - 1; i >= 0; --i) {
          if (before[i] == kInfinity) continue;
          // More layers only make the stage's compute slower and its memory bigger: stop
          // once it cannot win. (Not its messages' host time: an earlier cut may carry less.)
          const double compute = problem.stageSeconds(i, j, block);
          if (compute >= here) break;
          const double stage = compute + problem.hostSeconds(i, j, block);
          const double value = std::max({before[i], stage, problem.boundarySeconds(i, d0)});
          if (value < here) {
            here = value;
            from[at(d, j)] = {i, d0};
          }
        }
      }
    }
  int end_device = -1;
  for (int d = 1; d <= devices; ++d)
    if (best[at(d, n)] < kInfinity && (end_device < 0 || best[at(d, n)] < best[at(end_device, n)])) end_device = d;
  if (end_device >= 0 && problem.options().use_all_devices && end_device != devices) {
    if (best[at(devices, n)] == kInfinity)
      throw Error("planner: no partition occupies all " + std::to_string(devices) + " devices (the best uses " +
                  std::to_string(end_device) + "): " + std::to_string(n) + " blocks of layers, at most " +
                  (problem.options().max_replicas > 0 ? std::to_string(problem.options().max_replicas) : "any") +
                  " replicas per stage under " + problem.options().schedule + ", and memory decide; allow "
                  "replicas, or use fewer devices");
    end_device = devices;
  }
  if (end_device < 0) {
    double need = 0;
    const bool recompute = problem.options().recompute != Recompute::kNone;  // the smallest need
    for (int b = 0; b < n; ++b) need = std::max(need, problem.stageMemoryBytes(b, b + 1, 1, recompute));
    const double smallest = problem.deviceBlock(0, devices).memory_bytes;
    int64_t smallest_device = problem.cluster().device(0).memory_bytes;
    for (int d = 1; d < devices; ++d) smallest_device = std::min(smallest_device, problem.cluster().device(d).memory_bytes);
    // The process's own bytes (LibTorch, the runtime) come first; what is left is the layers'.
    const std::string process = text::humanBytes(static_cast<double>(problem.graph().processMemory().framework_bytes));
    const std::string why =
        smallest <= 0 ? "the smallest device's " + text::humanBytes(static_cast<double>(smallest_device)) +
                            " is taken by the process itself (" + process + ") before any layer, whose largest block "
                            "needs " + text::humanBytes(need)
        : need > smallest ? "a single block of layers needs up to " + text::humanBytes(need) + ", more than the " +
                              text::humanBytes(smallest) + " the smallest device (" +
                              text::humanBytes(static_cast<double>(smallest_device)) + ") has left beside the "
                              "process's own " + process
                        : "every block of layers fits a device (the largest needs " + text::humanBytes(need) +
                              "), but every tiling of the " + std::to_string(n) + " blocks over " +
                              std::to_string(devices) + " devices leaves a stage that does not";
    throw Error("planner: no partition fits memory under " + problem.options().schedule + " at micro-batch size " +
                std::to_string(problem.options().microbatch_size) + ": " + why +
                "; use " + (problem.options().microbatch_size > 1 ? "a smaller micro-batch, " : "") +
                "a schedule that holds fewer micro-batches, " + (recompute ? "" : "activation recomputation, ") +
                "or devices with more memory");
  }
  Partition result;
  result.objective = best[at(end_device, n)];
  result.assumed_depth = problem.options().assumed_depth;
  for (int j = n, d = end_device; j > 0;) {
    const auto [i, d0] = from[at(d, j)];
    result.stages.push_back({i, j, d0, d});
    j = i;
    d = d0;
  }
  std::reverse(result.stages.begin(), result.stages.end());
  return result;
}

std::optional<Partition> solveChainOnDevices(const ChainProblem& problem, const std::vector<int>& device_bounds,
                                             Transfers transfers) {
  const int n = problem.numBlocks(), k = static_cast<int>(device_bounds.size()) - 1;
  if (k < 1 || k > n || device_bounds.front() != 0 || device_bounds.back() > problem.numDevices())
    throw Error("planner: device bounds must start at 0, end within the " + std::to_string(problem.numDevices()) +
                " devices and hold 1 to " + std::to_string(n) + " stages");
  // best[s][j]: blocks [0, j) on the first s stages' devices; from[s][j]: the cut before stage s - 1.
  std::vector<std::vector<double>> best(k + 1, std::vector<double>(n + 1, kInfinity));
  std::vector<std::vector<int>> from(k + 1, std::vector<int>(n + 1, -1));
  best[0][0] = 0;
  for (int s = 1; s <= k; ++s) {
    const int d0 = device_bounds[s - 1];
    if (device_bounds[s] <= d0) throw Error("planner: each stage needs at least one device");
    const DeviceBlock block = problem.deviceBlock(d0, device_bounds[s]);
    // Stage s - 1 holds blocks [i, j); the later stages need a block each.
    for (int j = s; j <= n - (k - s); ++j)
      for (int i = j - 1; i >= s - 1; --i) {
        if (best[s - 1][i] == kInfinity) continue;
        const double compute = problem.stageSeconds(i, j, block);
        if (compute >= best[s][j]) break;  // more layers only slow the stage (solveChain)
        double stage = compute + problem.hostSeconds(i, j, block);
        if (transfers == Transfers::kSerialized)
          stage += problem.boundarySeconds(i, d0) + (s < k ? problem.boundarySeconds(j, device_bounds[s]) : 0);
        const double value = std::max({best[s - 1][i], stage, problem.boundarySeconds(i, d0)});
        if (value < best[s][j]) {
          best[s][j] = value;
          from[s][j] = i;
        }
      }
  }
  if (best[k][n] == kInfinity) return std::nullopt;
  Partition result;
  result.objective = best[k][n];
  result.assumed_depth = problem.options().assumed_depth;
  result.stages.resize(k);
  for (int s = k, j = n; s > 0; j = from[s][j], --s)
    result.stages[s - 1] = {from[s][j], j, device_bounds[s - 1], device_bounds[s]};
  return result;
}

ChainPlan partitionChain(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                         const PartitionOptions& options, const plan::ScheduleOptions& schedule) {
  PartitionOptions o = options;
  o.extra_weight_buffers = plan::extraWeightBuffers(schedule);
  if (o.assumed_depth > 0) {
    const ChainProblem problem(graph, cluster, o);
    const Partition p = solveChain(problem);
    return {toPlan(p, problem, schedule), p};
  }
  // A deeper pipeline holds more micro-batches in flight; re-plan until the depth the
  // memory check assumed covers the plan found (the depth only grows, up to the devices).
  for (o.assumed_depth = 1;;) {
    const ChainProblem problem(graph, cluster, o);
    const Partition p = solveChain(problem);
    const int depth = static_cast<int>(p.stages.size());
    if (depth <= o.assumed_depth) return {toPlan(p, problem, schedule), p};
    o.assumed_depth = depth;
  }
}

bool fitsMemory(const Partition& partition, const ChainProblem& problem) {
  // As a partition found without memory checks priced its stages: recomputing under kFull only.
  const bool recompute = problem.options().recompute == Recompute::kFull;
  for (const StageChoice& s : partition.stages)
    if (problem.stageMemoryBytes(s.first_block, s.end_block, s.replicas(), recompute) >
        problem.deviceBlock(s.first_device, s.end_device).memory_bytes)
      return false;
  return true;
}

plan::Plan toPlan(const Partition& partition, const ChainProblem& problem, const plan::ScheduleOptions& schedule) {
  plan::Plan plan;
  plan.microbatch_size = problem.options().microbatch_size;
  plan.microbatches = problem.options().microbatches;
  plan.schedule = schedule;
  for (const StageChoice& s : partition.stages) {
    plan::Stage stage;
    for (int l : problem.layersOf(s.first_block, s.end_block)) stage.layers.push_back(problem.graph().layer(l).name);
    for (int d = s.first_device; d < s.end_device; ++d) stage.devices.push_back(problem.cluster().device(d).name);
    plan.stages.push_back(std::move(stage));
  }
  return plan;
}

}  // namespace pipetrain::planner
