#include "pipetrain/torch/executor.h"

#include <algorithm>
#include <deque>

#include "pipetrain/util/error.h"

namespace pipetrain::runtime {

using schedule::Action;
using schedule::ActionType;

uint32_t messageTag(bool backward, int producer, int consumer, int microbatch, int num_stages, int microbatches) {
  const uint64_t tag = ((static_cast<uint64_t>(backward) * num_stages + producer) * num_stages + consumer) *
                           static_cast<uint64_t>(microbatches) + microbatch;
  if (tag > 0x7fffffffu)
    throw Error("too many stages x micro-batches to tag messages (" + std::to_string(num_stages) + " stages, " +
                std::to_string(microbatches) + " micro-batches)");
  return static_cast<uint32_t>(tag);
}

namespace {

// How many actions ahead receives are posted: enough to cover a rank's warm-up
// forwards without holding every buffer of a long mini-batch at once.
constexpr int kReceiveLookahead = 8;

// What one (stage, micro-batch) keeps between its forward and backward passes.
struct Activation {
  torch::Tensor input;        // requires grad unless this is the first stage
  torch::Tensor output;       // the stage output, or the scaled loss on the last stage
  torch::Tensor output_grad;  // kept from I for the later W
  torch::Tensor input_grad;   // to send to (or be read by) the producer stage
};

}  // namespace

struct PipelineExecutor::Impl {
  const schedule::Program& program;
  int rank;
  models::Model& model;
  std::vector<StageLayers> stages;
  Transport& transport;
  std::map<int, std::unique_ptr<torch::optim::Optimizer>> optimizers;
  std::vector<std::vector<int64_t>> shapes;

  std::map<std::pair<int, int>, Activation> live;  // (stage, micro-batch)
  struct Posted {
    torch::Tensor buffer;
    std::unique_ptr<PendingOp> op;
  };
  std::map<uint32_t, Posted> received;                // posted, not yet waited for
  std::map<uint32_t, torch::Tensor> arrived;          // completed, waiting for their consumer
  struct InFlight {
    torch::Tensor payload;
    std::unique_ptr<PendingOp> op;
  };
  std::deque<InFlight> sends;

  Impl(const schedule::Program& p, int r, models::Model& m, std::vector<StageLayers> s, Transport& t)
      : program(p), rank(r), model(m), stages(std::move(s)), transport(t) {}

  uint32_t tagOf(const Action& a) const {
    const bool backward = a.type == ActionType::SEND_B || a.type == ActionType::RECV_B;
    const bool sends = a.type == ActionType::SEND_F || a.type == ActionType::SEND_B;
    // producer/consumer of the edge the message crosses
    const int producer = backward == sends ? a.peer_stage : a.stage;
    const int consumer = backward == sends ? a.stage : a.peer_stage;
    return messageTag(backward, producer, consumer, a.microbatch, program.num_stages, program.microbatches);
  }

  void postReceive(const Action& a) {
    const uint32_t tag = tagOf(a);
    if (received.count(tag)) return;
    // A gradient has the shape of the activation it belongs to: the producer's output.
    const int producer = a.type == ActionType::RECV_F ? a.peer_stage : a.stage;
    torch::Tensor buffer = torch::empty(shapes[producer]);
    auto op = transport.recv(buffer, program.rankOf(a.peer_stage, a.microbatch), tag);
    received[tag] = Posted{buffer, std::move(op)};
  }

  torch::Tensor takeReceived(const Action& recv_action) {
    auto it = received.find(tagOf(recv_action));
    if (it == received.end()) throw Error("internal: receive not posted for " + schedule::toString(recv_action));
    it->second.op->wait();
    torch::Tensor t = it->second.buffer;
    received.erase(it);
    return t;
  }

  void forward(const Action& a, const MicrobatchData& data, MinibatchResult& result) {
    const int s = a.stage, j = a.microbatch;
    torch::Tensor x;
    if (program.isFirstStage(s)) {
      x = data.inputs(j);
    } else {
      const int q = program.stage_preds[s][0];
      if (program.rankOf(q, j) == rank) {
        x = live.at({q, j}).output.detach();
      } else {
        const uint32_t tag = messageTag(false, q, s, j, program.num_stages, program.microbatches);
        x = arrived.at(tag);
        arrived.erase(tag);
      }
      x.requires_grad_(true);
    }
    torch::Tensor y = models::forwardRange(model, stages[s].first, stages[s].last, x);
    if (program.isLastStage(s)) {
      // Each micro-batch's mean loss scaled by 1/m: the gradients then sum to those of the
      // whole mini-batch's mean loss, as in single-process training.
      y = models::lossOf(model, y, data.labels(j)) / program.microbatches;
      result.loss += y.item<double>();
      result.has_loss = true;
    }
    live[{s, j}] = Activation{x, y, {}, {}};
  }

  torch::Tensor outputGrad(const Action& a) {
    const int s = a.stage, j = a.microbatch;
    if (program.isLastStage(s)) return {};
    const int t = program.stage_succs[s][0];
    if (program.rankOf(t, j) == rank) {
      Activation& consumer = live.at({t, j});
      torch::Tensor g = consumer.input_grad;
      consumer.input_grad.reset();
      if (!consumer.output.defined()) live.erase({t, j});  // else its W is still to come
      return g;
    }
    const uint32_t tag = messageTag(true, s, t, j, program.num_stages, program.microbatches);
    torch::Tensor g = arrived.at(tag);
    arrived.erase(tag);
    return g;
  }

  void backward(const Action& a) {
    Activation& act = live.at({a.stage, a.microbatch});
    const torch::Tensor grad = outputGrad(a);
    const bool needs_input_grad = act.input.requires_grad();
    if (a.type == ActionType::B) {
      if (grad.defined()) act.output.backward(grad);
      else act.output.backward();
      if (needs_input_grad) act.input_grad = act.input.grad();
      act.output.reset();
    } else {  // I: input gradient now, keep the graph for W
      act.output_grad = grad.defined() ? grad : torch::ones_like(act.output);
      if (needs_input_grad)
        act.input_grad = torch::autograd::grad({act.output}, {act.input}, {act.output_grad},
                                               /*retain_graph=*/true)[0];
    }
    finishIfDone(a.stage, a.microbatch);
  }

  void weightBackward(const Action& a) {
    Activation& act = live.at({a.stage, a.microbatch});
    const auto params = model.parameters(stages[a.stage].first, stages[a.stage].last);
    if (!params.empty())
      torch::autograd::backward({act.output}, {act.output_grad}, /*retain_graph=*/false,
                                /*create_graph=*/false, params);
    act.output.reset();
    act.output_grad.reset();
    finishIfDone(a.stage, a.microbatch);
  }

  // Drops what a micro-batch no longer needs: everything, unless its input gradient
  // still has to reach the producer stage.
  void finishIfDone(int s, int j) {
    Activation& act = live.at({s, j});
    if (act.output.defined()) return;  // W still to come
    if (act.input_grad.defined()) {
      act.input.reset();
      return;
    }
    live.erase({s, j});
  }

  void send(const Action& a) {
    const int s = a.stage, j = a.microbatch;
    Activation& act = live.at({s, j});
    torch::Tensor payload = a.type == ActionType::SEND_F ? act.output.detach() : act.input_grad;
    if (a.type == ActionType::SEND_B) {
      act.input_grad.reset();
      if (!act.output.defined()) live.erase({s, j});  // else W is still to come
    }
    auto op = transport.send(payload, program.rankOf(a.peer_stage, j), tagOf(a));
    sends.push_back(InFlight{payload, std::move(op)});
  }

  void allReduce(int s) {
    std::vector<torch::Tensor> grads;
    for (auto& p : model.parameters(stages[s].first, stages[s].last)) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      grads.push_back(p.grad());
    }
    transport.allReduceSum(grads, program.stage_ranks[s]);
  }
};

PipelineExecutor::PipelineExecutor(const schedule::Program& program, int rank, models::Model& model,
                                   std::vector<StageLayers> stages, int64_t microbatch_size, Transport& transport,
                                   const OptimizerFactory& make_optimizer)
    : impl_(std::make_unique<Impl>(program, rank, model, std::move(stages), transport)) {
  if (program.minibatches != 1) throw Error("the runtime runs one mini-batch per Program");
  if (static_cast<int>(impl_->stages.size()) != program.num_stages)
    throw Error("the plan has " + std::to_string(impl_->stages.size()) + " stages, the schedule " +
                std::to_string(program.num_stages));
  for (int s = 0; s < program.num_stages; ++s)
    if (program.stage_preds[s].size() > 1 || program.stage_succs[s].size() > 1)
      throw Error("stage " + std::to_string(s) + " has several producers or consumers; the runtime runs chains of stages");

  // Message shapes from a dry run of one micro-batch through the whole model.
  {
    torch::NoGradGuard no_grad;
    std::vector<int64_t> shape{microbatch_size};
    for (int64_t d : model.input.sample_shape) shape.push_back(d);
    torch::Tensor x = model.input.kind == models::InputKind::kTokens ? torch::zeros(shape, torch::kLong)
                                                                      : torch::zeros(shape);
    for (const StageLayers& st : impl_->stages) {
      x = models::forwardRange(model, st.first, st.last, x);
      output_shapes_.push_back(x.sizes().vec());
    }
  }
  impl_->shapes = output_shapes_;
  my_stages_ = program.stagesOfRank(rank);
  for (int s : my_stages_)
    impl_->optimizers[s] = make_optimizer(model.parameters(impl_->stages[s].first, impl_->stages[s].last));
}

PipelineExecutor::~PipelineExecutor() = default;

std::vector<torch::Tensor> PipelineExecutor::parameters() const {
  std::vector<torch::Tensor> out;
  for (int s : my_stages_)
    for (auto& p : impl_->model.parameters(impl_->stages[s].first, impl_->stages[s].last)) out.push_back(p);
  return out;
}

MinibatchResult PipelineExecutor::runMinibatch(const MicrobatchData& data, Clock::time_point origin) {
  Impl& m = *impl_;
  const auto& actions = m.program.ranks[m.rank];
  MinibatchResult result;
  auto seconds = [origin](Clock::time_point t) { return std::chrono::duration<double>(t - origin).count(); };
  int posted = 0;
  for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
    for (; posted < static_cast<int>(actions.size()) && posted <= i + kReceiveLookahead; ++posted) {
      const Action& ahead = actions[posted];
      if (ahead.type == ActionType::RECV_F || ahead.type == ActionType::RECV_B) m.postReceive(ahead);
    }
    const Action& a = actions[i];
    const auto start = Clock::now();
    switch (a.type) {
      case ActionType::RECV_F:
      case ActionType::RECV_B:
        m.arrived[m.tagOf(a)] = m.takeReceived(a);
        result.wait_seconds += seconds(Clock::now()) - seconds(start);
        continue;  // waiting is idle time, not an action
      case ActionType::SEND_F:
      case ActionType::SEND_B:
        m.send(a);
        continue;
      case ActionType::F: m.forward(a, data, result); break;
      case ActionType::B:
      case ActionType::I: m.backward(a); break;
      case ActionType::W: m.weightBackward(a); break;
      case ActionType::ALLREDUCE: m.allReduce(a.stage); break;
      case ActionType::STEP:
        m.optimizers.at(a.stage)->step();
        m.optimizers.at(a.stage)->zero_grad();
        break;
      default: break;
    }
    result.actions.push_back({a, seconds(start), seconds(Clock::now())});
  }
  const auto flush = Clock::now();
  for (auto& s : m.sends) s.op->wait();
  m.sends.clear();
  result.wait_seconds += seconds(Clock::now()) - seconds(flush);
  if (!m.live.empty() || !m.received.empty() || !m.arrived.empty())
    throw Error("rank " + std::to_string(m.rank) + ": the schedule left " + std::to_string(m.live.size()) +
                " activations and " + std::to_string(m.received.size() + m.arrived.size()) + " messages unused");
  return result;
}

}  // namespace pipetrain::runtime
