#include "executor_impl.h"

#include <algorithm>
#include <cmath>

#include "gradient_clipping.h"
#include "pipetrain/sim/cost_model.h"
#include "pipetrain/util/error.h"

namespace pipetrain::runtime {
namespace {

// How many actions ahead receives are posted: enough to cover a rank's warm-up
// forwards without holding every buffer of a long mini-batch at once.
constexpr int kReceiveLookahead = 8;

// The group of a collective over every rank of the job.
std::vector<int> everyRank(const DataChannel& channel) {
  std::vector<int> ranks(channel.worldSize());
  for (int r = 0; r < channel.worldSize(); ++r) ranks[r] = r;
  return ranks;
}

// Gradient buckets for replicated stages: sim::kGradientBucketBytes, which the simulator
// prices (a 1024 x 1024 layer per bucket; DDP's default of 25 MiB would make the 8 x 1024
// mlp one bucket and overlap nothing). Not tuned further.

}  // namespace

MinibatchLoss PipelineExecutor::Impl::minibatchLoss(const schedule::Program& p, int minibatch) {
  const auto [sum, count] = minibatch_loss[minibatch];
  minibatch_loss.erase(minibatch);
  for (const auto& [s, st] : state)
    if (p.isLastStage(s)) return MinibatchLoss(minibatch, sum, count, st.device, p.stage_ranks[s], channel);
  return MinibatchLoss(minibatch);
}

PipelineExecutor::Impl::Impl(const schedule::Program& p, int r, models::Model& m, std::vector<StageLayers> s,
                             DataChannel& t, const LatestWeightCorrections& c, Precision precision, StepRecipe recipe)
    : program(&p), rank(r), model(m), stages(std::move(s)), channel(t), corrections(c), precision(precision),
      recipe(std::move(recipe)), latest(p.backward_weights == schedule::BackwardWeights::kLatest) {}

void PipelineExecutor::Impl::postReceive(const Action& a, const schedule::MessageFacts& m) {
  const Edge& edge = edges.at({m.producer, m.consumer});
  Mail& mail = mailbox.at(m.slot);
  mail.buffer = torch::empty(edge.messageShape(), torch::dtype(edge.dtype).device(state.at(a.stage).device));
  mail.op = channel.recv(mail.buffer, m.peer, m.tag);
}

void PipelineExecutor::Impl::awaitReceived(const Action& a, const schedule::MessageFacts& m) {
  Mail& mail = mailbox.at(m.slot);
  if (!mail.op) throw Error("internal: receive not posted for " + schedule::toString(a));
  mail.op->wait();
  mail.op.reset();
}

torch::Tensor PipelineExecutor::Impl::takeMail(int slot) {
  Mail& mail = mailbox.at(slot);
  if (!mail.buffer.defined() || mail.op)
    throw Error("internal: no message has arrived in slot " + std::to_string(slot));
  return std::exchange(mail.buffer, torch::Tensor());
}

void PipelineExecutor::Impl::withWeights(const Action& a, const std::function<void()>& compute) {
  StageState& st = state.at(a.stage);
  // T2: a backward pass on the current version runs on w - tau x delta, an estimate
  // of the weights its forward pass read tau steps ago.
  const bool t2 = latest && corrections.discrepancy && (a.type == ActionType::B || a.type == ActionType::I);
  const int tau = t2 ? st.version - facts.forward_version.at({a.stage, a.microbatch}) : 0;
  auto what = [&] {
    return "rank " + std::to_string(rank) + ": " + schedule::toString(a) + " of stage " + std::to_string(a.stage);
  };
  withVersion(st, a.version, tau, what, [&] {
    if (probe) probe(a, st.params);
    compute();
  });
}

torch::Tensor PipelineExecutor::Impl::toDevice(const torch::Tensor& t, int stage) const {
  const torch::Device device = state.at(stage).device;
  if (device.is_cpu()) return t;
  return t.pin_memory().to(device, /*non_blocking=*/true);
}

std::map<std::string, torch::Tensor> PipelineExecutor::Impl::takeInputs(
    const schedule::Program& p, const Action& a, const schedule::PositionFacts& at, const MicrobatchData& data,
    bool training, std::map<int, std::vector<torch::Tensor>>* leaves) {
  const int s = a.stage, j = a.microbatch;
  std::map<std::string, torch::Tensor> values;
  if (reads_input[s]) values[models::kModelInput] = toDevice(data.inputs(j), s);
  for (std::size_t i = 0; i < p.stage_preds[s].size(); ++i) {
    const int q = p.stage_preds[s][i];
    const Edge& edge = edges.at({q, s});
    std::vector<torch::Tensor> tensors;
    if (at.input_slots[i] < 0) {
      Activation& producer = live.at({q, j});
      for (int l : edge.layers) tensors.push_back(producer.outputs.at(l).detach());
      if (!training && --producer.consumers_left == 0) live.erase({q, j});
    } else {
      tensors = edge.unpack(takeMail(at.input_slots[i]));
    }
    for (std::size_t k = 0; k < tensors.size(); ++k) {
      if (training) tensors[k] = tensors[k].detach().requires_grad_(true);
      values[model.layers[edge.layers[k]].name] = tensors[k];
    }
    if (leaves) (*leaves)[q] = std::move(tensors);
  }
  return values;
}

std::map<int, torch::Tensor> PipelineExecutor::Impl::sentOutputs(
    const schedule::Program& p, int s, const std::map<std::string, torch::Tensor>& values) const {
  std::map<int, torch::Tensor> out;
  for (int t : p.stage_succs[s])
    for (int l : edges.at({s, t}).layers) out[l] = values.at(model.layers[l].name);
  return out;
}

const torch::Tensor& PipelineExecutor::Impl::modelOutput(const std::map<std::string, torch::Tensor>& values) const {
  return values.at(model.layers.back().name);
}

void PipelineExecutor::Impl::forward(const schedule::Program& p, const Action& a, const schedule::PositionFacts& at,
                                     const MicrobatchData& data) {
  const int s = a.stage, j = a.microbatch;
  Activation act;
  std::map<std::string, torch::Tensor> values = takeInputs(p, a, at, data, true, &act.inputs);
  const torch::Tensor labels = p.isLastStage(s) ? toDevice(data.labels(j), s) : torch::Tensor();
  AutocastScope autocast(precision, state.at(s).device);
  const bool recompute = stages[s].recompute;
  const auto part = part_recomputed.find(s);
  const bool partly = part != part_recomputed.end();
  if (recompute) act.replay.emplace(state.at(s).device, values, labels);
  withWeights(a, [&] {
    if (partly) {
      values = forwardKeeping(model, part->second, std::move(values), act.kept);
      return;
    }
    std::optional<torch::NoGradGuard> no_graph;  // a recomputing stage builds it again before B
    if (recompute) no_graph.emplace();
    values = models::forwardLayers(model, stages[s].layers, std::move(values));
  });
  if (facts.split_stages.count(s) && (!recompute || partly))
    for (int l : partly ? part->second.rest : stages[s].layers)
      act.layer_outputs.push_back(values.at(model.layers[l].name));
  act.outputs = sentOutputs(p, s, values);
  if (p.isLastStage(s)) {
    torch::Tensor loss = models::lossOf(model, modelOutput(values), labels);
    // Summed where it was computed: reading it here would wait for the device.
    auto& [sum, count] = minibatch_loss[j / p.microbatches];
    sum = sum.defined() ? sum + loss.detach() : loss.detach();
    ++count;
    act.loss = loss * facts.steps.loss_scale[j];
  }
  live[{s, j}] = std::move(act);
}

void PipelineExecutor::Impl::evalForward(const schedule::Program& p, const Action& a, const schedule::PositionFacts& at,
                                         const MicrobatchData& data, EvalResult& result) {
  const int s = a.stage, j = a.microbatch;
  AutocastScope autocast(precision, state.at(s).device);
  const auto values = models::forwardLayers(model, stages[s].layers, takeInputs(p, a, at, data, false, nullptr));
  if (!p.isLastStage(s)) {
    Activation act;
    act.outputs = sentOutputs(p, s, values);
    act.consumers_left = static_cast<int>(p.stage_succs[s].size());
    live[{s, j}] = std::move(act);
    return;
  }
  const torch::Tensor& y = modelOutput(values);
  const int64_t valid = data.valid_samples ? data.valid_samples(j) : y.size(0);
  if (valid <= 0) return;
  const torch::Tensor out = y.narrow(0, 0, valid), labels = toDevice(data.labels(j).narrow(0, 0, valid), s);
  result.loss_sum += models::lossOf(model, out, labels).item<double>() * labels.numel();
  result.correct += models::correctPredictions(model, out, labels);
  result.positions += labels.numel();
}

void PipelineExecutor::Impl::send(const Action& a, int position, const schedule::MessageFacts& m, bool training) {
  const int s = a.stage, j = a.microbatch;
  Activation& act = live.at({s, j});
  torch::Tensor payload;
  if (a.type == ActionType::SEND_B) {
    payload = act.input_grads.at(a.peer_stage);
    act.input_grads.erase(a.peer_stage);
    finishIfDone(s, j);
  } else {
    const Edge& edge = edges.at({s, a.peer_stage});
    std::vector<torch::Tensor> tensors;
    for (int l : edge.layers) tensors.push_back(act.outputs.at(l).detach());
    payload = edge.pack(tensors);
    if (!training && --act.consumers_left == 0) live.erase({s, j});
  }
  auto op = channel.send(payload, m.peer, m.tag);
  sends[position] = InFlight{payload, std::move(op)};
  max_sends_held = std::max(max_sends_held, static_cast<int>(sends.size()));
}

void PipelineExecutor::Impl::releaseDeliveredSends(const schedule::PositionFacts& at) {
  for (int position : at.sends_delivered) {
    auto send = sends.find(position);
    if (send == sends.end()) continue;
    send->second.op->wait();
    sends.erase(send);
  }
}

void PipelineExecutor::Impl::allReduce(int s) { state.at(s).buckets->finish(); }

void PipelineExecutor::Impl::armBuckets(const schedule::PositionFacts& at) {
  if (at.completes_gradients_of >= 0) state.at(at.completes_gradients_of).buckets->arm();
}

torch::Tensor PipelineExecutor::Impl::clipCoefficientAt(const Action& a) {
  const auto factor = [&](int stage, int v) { return facts.steps.gradient_factor[stage].at(v); };
  auto gradsOf = [&](int s) {
    std::vector<torch::Tensor> grads;
    for (const torch::Tensor& p : state.at(s).params)
      if (!(tied && tied->isLaterCopy(p))) grads.push_back(p.grad());
    return grads;
  };
  if (!recipe.whole_model) {
    latest_squared_norm = squaredNorm(gradsOf(a.stage), factor(a.stage, a.version), state.at(a.stage).device);
    return clipCoefficient(latest_squared_norm, recipe.clip_norm);
  }
  auto known = clip_of_version.find(a.version);
  if (known != clip_of_version.end()) return known->second.second;
  // This rank's first STEP of the round: all its gradients of the round are complete
  // (checked at construction), the tied weights' once summed.
  if (tied)
    for (int s : steps_into.at(a.version)) tied->beforeStep(s, a.version, factor);
  torch::Tensor squared = torch::zeros({1}, torch::dtype(torch::kFloat).device(model.device));
  for (const auto& [s, st] : state)
    if (program->stage_ranks[s].front() == rank)  // a replicated stage's gradient counts once
      squared.add_(squaredNorm(gradsOf(s), factor(s, a.version), st.device));
  if (channel.worldSize() > 1) channel.startAllReduceSum(squared, everyRank(channel))->wait();
  clip_of_version.erase(clip_of_version.begin(), clip_of_version.lower_bound(a.version - 1));
  const torch::Tensor coefficient = clipCoefficient(squared, recipe.clip_norm);
  clip_of_version[a.version] = {squared, coefficient};
  return coefficient;
}

double PipelineExecutor::Impl::reportedNorm(int minibatch) {
  if (recipe.clip_norm <= 0) return std::nan("");
  torch::Tensor squared = latest_squared_norm;
  if (recipe.whole_model) {
    const auto it = clip_of_version.find(minibatch + 1);  // the version mini-batch k's step made
    squared = it == clip_of_version.end() ? torch::Tensor() : it->second.first;
  }
  return squared.defined() ? std::sqrt(squared.item<double>()) : std::nan("");
}

void PipelineExecutor::Impl::step(const Action& a, const schedule::PositionFacts& at) {
  const int s = a.stage;
  StageState& st = state.at(s);
  StepOptions o;
  o.stash_old = at.stash_at_step;
  o.gradient_factor = facts.steps.gradient_factor[s].at(a.version);
  if (tied) tied->beforeStep(s, a.version, [&](int stage, int v) { return facts.steps.gradient_factor[stage].at(v); });
  if (recipe.clip_norm > 0) o.clip = clipCoefficientAt(a);
  const bool t1 = latest && corrections.lr_warmup;
  o.lr = stepRate(recipe.rate ? recipe.rate(s, st.steps_taken) : st.base_lr, st.steps_taken,
                  t1 ? facts.stage_delays[s] : 0, corrections.warmup_steps);
  if (latest && corrections.discrepancy)
    o.t2_decay = schedule::correctionDecay(corrections.decay, facts.stage_delays[s]);
  stepStage(st, a.version, o);
}

RunResult PipelineExecutor::Impl::execute(const schedule::Program& p, const MicrobatchData& data,
                                          Clock::time_point origin,
                                          const MinibatchDone& on_minibatch, EvalResult* eval) {
  const auto& actions = p.ranks[rank];
  const schedule::RankFacts& f = eval ? eval_facts : facts;  // of `p`
  mailbox.clear();
  mailbox.resize(f.slots);
  steps_into.clear();
  clip_of_version.clear();
  for (const Action& a : actions)
    if (a.type == ActionType::STEP) steps_into[a.version].push_back(a.stage);
  for (auto& [s, st] : state) {
    st.version = 0;  // the Program's version 0 is the weights as they are now
    if (!st.stash.empty()) throw Error("internal: stashed versions left from the last run");
  }
  RunResult result;
  auto seconds = [origin](Clock::time_point t) { return std::chrono::duration<double>(t - origin).count(); };
  ActionTimer timer(model.device, origin);
  int posted = 0;
  std::optional<MinibatchLoss> unreported;
  double unreported_ended = 0;  // when the unreported mini-batch's last action here ended
  for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
    for (; posted < static_cast<int>(actions.size()) && posted <= i + kReceiveLookahead; ++posted) {
      const Action& ahead = actions[posted];
      if (ahead.type == ActionType::RECV_F || ahead.type == ActionType::RECV_B)
        postReceive(ahead, *f.positions[posted].message);
    }
    const Action& a = actions[i];
    const schedule::PositionFacts& at = f.positions[i];
    const auto start = Clock::now();
    const bool compute = !eval && a.type != ActionType::RECV_F && a.type != ActionType::RECV_B &&
                         a.type != ActionType::SEND_F && a.type != ActionType::SEND_B;
    if (compute) timer.start();  // waiting and sending are not actions of the timeline
    switch (a.type) {
      case ActionType::RECV_F:
      case ActionType::RECV_B:
        awaitReceived(a, *at.message);
        result.wait_seconds += seconds(Clock::now()) - seconds(start);
        releaseDeliveredSends(at);
        break;
      case ActionType::SEND_F:
      case ActionType::SEND_B:
        send(a, i, *at.message, eval == nullptr);
        break;
      case ActionType::F:
        if (eval)
          evalForward(p, a, at, data, *eval);
        else
          forward(p, a, at, data);
        break;
      case ActionType::B:
      case ActionType::I:
        armBuckets(at);
        backward(a, at);
        break;
      case ActionType::W:
        armBuckets(at);
        weightBackward(a);
        break;
      case ActionType::ALLREDUCE:
        allReduce(a.stage);
        break;
      case ActionType::STEP:
        step(a, at);
        break;
      default:
        break;
    }
    if (eval) continue;
    // A stashed version is dropped once nothing later reads it (the accounting's rule).
    for (const auto& [stage, version] : at.retire) state.at(stage).stash.erase(version);
    if (compute) timer.stop(a);
    if (at.minibatch_done >= 0) {
      // Reported one mini-batch late: reading a loss waits for the device to compute it,
      // and by then the next mini-batch's work is queued, so a GPU never idles while the
      // host catches up. Its time is when it ended, not when it is reported: a report's
      // time read a mini-batch late made the last of a run look a mini-batch short.
      const double ended = seconds(Clock::now());
      if (unreported && on_minibatch)
        on_minibatch(unreported->minibatch(), unreported->mean(), unreported_ended,
                     reportedNorm(unreported->minibatch()));
      unreported = minibatchLoss(p, at.minibatch_done);
      unreported_ended = ended;
    }
  }
  if (unreported && on_minibatch)
    on_minibatch(unreported->minibatch(), unreported->mean(), unreported_ended, reportedNorm(unreported->minibatch()));
  timer.finish(result.actions, result.action_cpu_seconds);
  const auto flush = Clock::now();
  for (auto& [position, s] : sends) s.op->wait();
  sends.clear();
  result.max_sends_held = max_sends_held;
  max_sends_held = 0;
  result.wait_seconds += seconds(Clock::now()) - seconds(flush);
  const auto unused = std::count_if(mailbox.begin(), mailbox.end(), [](const Mail& m) { return m.buffer.defined(); });
  if (!live.empty() || unused > 0)
    throw Error("rank " + std::to_string(rank) + ": the schedule left " + std::to_string(live.size()) +
                " activations and " + std::to_string(unused) + " messages unused");
  return result;
}

bool readsModelInput(const models::Model& model, const StageLayers& stage) {
  for (int l : stage.layers)
    for (const std::string& input : models::layerInputs(model, l))
      if (input == models::kModelInput) return true;
  return false;
}

PipelineExecutor::PipelineExecutor(const schedule::Program& program, int rank, models::Model& model,
                                   std::vector<StageLayers> stages, int64_t microbatch_size, DataChannel& channel,
                                   const OptimizerFactory& make_optimizer, const LatestWeightCorrections& corrections,
                                   Precision precision, StepRecipe recipe)
    : impl_(std::make_unique<Impl>(program, rank, model, std::move(stages), channel, corrections, precision,
                                   std::move(recipe))) {
  Impl& m = *impl_;
  if (static_cast<int>(m.stages.size()) != program.num_stages)
    throw Error("the plan has " + std::to_string(m.stages.size()) + " stages, the schedule " +
                std::to_string(program.num_stages));
  StageEdges edges = stageEdges(model, m.stages, program, microbatch_size, precision);
  m.edges = std::move(edges.edges);
  output_bytes_ = std::move(edges.output_bytes);
  for (int s = 0; s < program.num_stages; ++s) m.reads_input.push_back(readsModelInput(model, m.stages[s]));
  my_stages_ = program.stagesOfRank(rank);
  m.facts = schedule::rankFacts(*m.program, m.rank);
  channel.preparePeers(m.facts.peers);
  if (m.recipe.clip_norm > 0 && m.recipe.whole_model) {
    if (!schedule::stepsFollowAllGradients(program, rank, {my_stages_.begin(), my_stages_.end()}))
      throw Error("rank " + std::to_string(rank) + " steps a stage before its other stages' gradients of the "
                  "mini-batch are complete, so the whole model's gradient norm is not known there: clipping by it "
                  "needs a synchronous schedule");
    // First, so that every rank readies its groups in one order.
    if (channel.worldSize() > 1) channel.prepareGroup(everyRank(channel));
  }
  for (int s : my_stages_) {
    const std::vector<int>& layers = m.stages[s].layers;
    const int recomputed = m.stages[s].recompute ? m.stages[s].recompute_layers : 0;
    if (recomputed > 0 && recomputed < static_cast<int>(layers.size())) {
      std::vector<int> sent;
      for (int t : program.stage_succs[s])
        for (int l : m.edges.at({s, t}).layers) sent.push_back(l);
      m.part_recomputed[s] = partRecomputed(model, layers, recomputed, sent);
    }
    if (m.stages[s].recompute) {
      std::vector<torch::Tensor>& buffers = m.recomputed_buffers[s];
      const auto again = m.part_recomputed.count(s) ? m.part_recomputed.at(s).layers : layers;
      for (int l : again)
        for (const torch::Tensor& b : model.layers[l].module.ptr()->buffers()) buffers.push_back(b);
    }
    StageState& st = m.state.emplace(s, StageState{model.device}).first->second;
    st.params = model.parameters(m.stages[s].layers);
    for (const auto& p : st.params) st.aliases.push_back(p.data().set_requires_grad(true));
    st.optimizer = make_optimizer(s, st.aliases);
    st.base_lr = st.optimizer->param_groups().empty() ? 0.0 : st.optimizer->param_groups()[0].options().get_lr();
    if (program.stage_ranks[s].size() > 1)
      st.buckets =
          std::make_unique<GradientBuckets>(st.params, program.stage_ranks[s], channel, sim::kGradientBucketBytes);
  }
  if (!model.tied.empty()) m.tied = std::make_unique<TiedGradients>(model, m.stages, program, rank, channel);
}

PipelineExecutor::~PipelineExecutor() = default;

RunResult PipelineExecutor::run(const schedule::Program& program, const MicrobatchData& data, Clock::time_point origin,
                                const MinibatchDone& on_minibatch) {
  Impl& m = *impl_;
  if (&program != m.program) {
    if (program.num_stages != m.program->num_stages || program.stage_ranks != m.program->stage_ranks ||
        program.microbatches != m.program->microbatches)
      throw Error("internal: a Program of another layout than the executor's");
    m.program = &program;
    m.facts = schedule::rankFacts(*m.program, m.rank);
  }
  return m.execute(program, data, origin, on_minibatch, nullptr);
}

EvalResult PipelineExecutor::evaluate(const schedule::Program& forward_only, const MicrobatchData& data) {
  torch::NoGradGuard no_grad;
  EvalResult result;
  impl_->eval_facts = schedule::messageFacts(forward_only, impl_->rank);
  impl_->execute(forward_only, data, Clock::now(), {}, &result);
  return result;
}

void PipelineExecutor::setWeightProbe(WeightProbe probe) { impl_->probe = std::move(probe); }

std::vector<torch::Tensor> PipelineExecutor::parameters() const {
  std::vector<torch::Tensor> out;
  for (int s : my_stages_) out.insert(out.end(), impl_->state.at(s).params.begin(), impl_->state.at(s).params.end());
  return out;
}

std::vector<StageWeights> PipelineExecutor::weights() const {
  std::vector<StageWeights> out;
  for (int s : my_stages_) {
    StageWeights w;
    w.stage = s;
    const StageState& st = impl_->state.at(s);
    w.peak_versions = st.peak_versions;
    w.extra_buffers = static_cast<int>(!st.velocity.empty()) + static_cast<int>(!st.corrected.empty());
    for (const auto& p : st.params) w.param_bytes += p.numel() * p.element_size();
    out.push_back(w);
  }
  return out;
}

std::vector<PipelineExecutor::TensorMap> PipelineExecutor::parameterState(int s) const {
  return parameterStateOf(impl_->state.at(s));
}

void PipelineExecutor::loadParameterState(int s, const std::vector<TensorMap>& state) {
  runtime::loadParameterState(impl_->state.at(s), s, state);
}

int64_t PipelineExecutor::stepsTaken(int s) const { return impl_->state.at(s).steps_taken; }
void PipelineExecutor::setStepsTaken(int s, int64_t steps) { impl_->state.at(s).steps_taken = steps; }

}  // namespace pipetrain::runtime
