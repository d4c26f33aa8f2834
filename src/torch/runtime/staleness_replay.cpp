#include "staleness_replay.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "gradient_clipping.h"
#include "optimizer_state.h"
#include "training_recipe.h"
#include "pipetrain/plan/plan_program.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/schedule/staleness.h"
#include "pipetrain/torch/device.h"
#include "pipetrain/torch/precision.h"
#include "pipetrain/util/error.h"

namespace pipetrain::runtime {
namespace {

std::vector<torch::Tensor> cloneTensors(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> out;
  for (const auto& t : tensors) out.push_back(t.detach().clone());
  return out;
}

}  // namespace

struct StalenessReplay::Impl {
  const TrainConfig& c;
  models::Model& model;
  const schedule::Program program;
  const Precision precision;
  const int ns, m;
  std::vector<std::vector<int>> read_f, read_b;  // [stage][micro-batch]: the versions its F and B read
  std::vector<std::map<int, int>> last_read;     // [stage][version]: the last micro-batch reading it
  const schedule::StepCombination steps;
  const bool latest;
  const LatestWeightCorrections corrections;
  const std::vector<int> delays;
  std::vector<std::vector<torch::Tensor>> params;
  // The versions still to be read and the newest, and under T2 the velocity as each
  // version was made (a backward pass corrects by the one of the version it reads).
  std::vector<std::map<int, std::vector<torch::Tensor>>> versions, velocity;
  std::vector<std::unique_ptr<torch::optim::Optimizer>> optimizers;
  std::vector<std::map<int, int>> arrived;
  std::unique_ptr<data::Dataset> train;
  // Mini-batches beyond an epoch's go on in the next epoch's order.
  const int first_epoch;
  int64_t minibatches_per_epoch = 1;
  std::optional<data::SampleOrder> order;
  int order_epoch = -1;
  bool track_discrepancy = false;
  std::vector<Discrepancy> discrepancy;  // sums of squares until read
  std::set<const void*> later_copies;    // tied weights' copies but the first: a norm counts them once

  Impl(const TrainConfig& config, models::Model& mdl, int minibatches, int order_epoch)
      : c(config),
        model(mdl),
        program(plan::programForPlan(c.plan, plan::stageDag(c.plan, model.layerGraph()), minibatches)),
        precision(parsePrecision(c.precision)),
        ns(c.plan.numStages()),
        m(program.microbatches),
        steps(schedule::stepCombination(program)),
        latest(program.backward_weights == schedule::BackwardWeights::kLatest),
        corrections(correctionsOf(c.plan.schedule)),
        delays(schedule::stageDelays(program)),
        train(data::openDataset(c.data, model.input)),
        first_epoch(order_epoch) {
    // Tied copies stay equal where every stage steps together (runtime/tied_gradients.h).
    if (!model.tied.empty() && schedule::isAsynchronous(c.plan.schedule.name))
      throw Error("internal: the staleness replay takes tied weights under synchronous schedules only");
    models::moveTo(model, rankDevice(c.device, 0));
    order.emplace(data::sampleOrder(c.data, train.get(), train->size(), c.seed, first_epoch));
    order_epoch = first_epoch;
    minibatches_per_epoch = order->minibatchesPerEpoch(c.plan.microbatch_size, m);
    if (minibatches_per_epoch < 1) throw Error("the data holds less than one mini-batch");
    const int total = program.totalMicrobatches();
    read_f.assign(ns, std::vector<int>(total, 0));
    read_b = read_f;
    last_read.resize(ns);
    for (const auto& actions : program.ranks)
      for (const schedule::Action& a : actions) {
        if (a.type == schedule::ActionType::F) read_f[a.stage][a.microbatch] = a.version;
        if (a.type == schedule::ActionType::B || a.type == schedule::ActionType::I)
          read_b[a.stage][a.microbatch] = a.version;
        if (a.type == schedule::ActionType::F || a.type == schedule::ActionType::B ||
            a.type == schedule::ActionType::I) {
          int& last = last_read[a.stage][a.version];
          last = std::max(last, a.microbatch);
        }
      }
    const std::vector<StageLayers> stages = stageLayers(c.plan, model);
    versions.resize(ns);
    velocity.resize(ns);
    arrived.resize(ns);
    for (int s = 0; s < ns; ++s) {
      params.push_back(model.parameters(stages[s].layers));
      versions[s][0] = cloneTensors(params[s]);
      if (t2()) {
        velocity[s][0] = cloneTensors(params[s]);
        for (auto& v : velocity[s][0]) v.zero_();
      }
      optimizers.push_back(optimizerOf(c, model, stages[s].layers, params[s]));
    }
    for (const torch::Tensor& copy : models::laterTiedCopies(model)) later_copies.insert(copy.unsafeGetTensorImpl());
  }

  bool t2() const { return latest && corrections.discrepancy; }
  int newest(int s) const { return versions[s].rbegin()->first; }

  void load(int s, int v) {
    const auto it = versions[s].find(v);
    if (it == versions[s].end()) throw Error("internal: the replay dropped version " + std::to_string(v));
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params[s].size(); ++i) params[s][i].data().copy_(it->second[i]);
  }

  void run(int j) {
    const int64_t k = j / m;
    const int epoch = first_epoch + static_cast<int>(k / minibatches_per_epoch);
    if (epoch != order_epoch) {
      order.emplace(data::sampleOrder(c.data, train.get(), train->size(), c.seed, epoch));
      order_epoch = epoch;
    }
    const data::Batch batch =
        train->get(order->microbatch(k % minibatches_per_epoch, j % m, c.plan.microbatch_size, m));
    for (int s = 0; s < ns; ++s) load(s, read_f[s][j]);
    torch::Tensor loss;
    {
      AutocastScope autocast(precision, model.device);
      loss = models::lossOf(model, models::forwardModel(model, batch.inputs.to(model.device)),
                            batch.labels.to(model.device)) * steps.loss_scale[j];
    }
    for (int s = 0; s < ns; ++s) {
      load(s, read_b[s][j]);
      // T2: a backward pass on the current weights runs on w - tau x delta, an estimate
      // of the weights its forward pass read tau steps ago.
      const int tau = read_b[s][j] - read_f[s][j];
      if (track_discrepancy && tau > 0) addDistance(s, read_f[s][j], &Discrepancy::stale);
      if (t2() && tau > 0) {
        torch::NoGradGuard no_grad;
        const auto& delta = velocity[s].at(read_b[s][j]);
        for (std::size_t i = 0; i < params[s].size(); ++i) params[s][i].data().sub_(delta[i], tau);
        if (track_discrepancy) addDistance(s, read_f[s][j], &Discrepancy::corrected);
      }
      if (track_discrepancy && tau > 0) ++discrepancy[s].passes;
    }
    loss.backward();
    std::vector<int> stepping;  // the stages whose STEP follows this micro-batch
    for (int s = 0; s < ns; ++s) {
      const int v = steps.step_of[s][j];
      if (v >= 0 && ++arrived[s][v] == steps.combined[s].at(v)) stepping.push_back(s);
    }
    if (!stepping.empty()) models::sumTiedGradients(model);
    const std::map<int, torch::Tensor> clip = clipCoefficients(stepping, j);
    for (int s : stepping) step(s, steps.step_of[s][j], clip.count(s) ? clip.at(s) : torch::Tensor());
    for (int s = 0; s < ns; ++s) forgetUnread(s, j);
  }

  // Adds the squared distance of stage s's parameters from version v to `field`.
  void addDistance(int s, int v, double Discrepancy::*field) {
    torch::NoGradGuard no_grad;
    const auto& w = versions[s].at(v);
    double sq = 0;
    for (std::size_t i = 0; i < w.size(); ++i) sq += (params[s][i].detach() - w[i]).pow(2).sum().item<double>();
    discrepancy[s].*field += sq;
  }

  // Clipping as the executor clips (executor.h, StepRecipe): the stepping stages' whole
  // norm under a synchronous schedule (every stage steps together), else each stage's own.
  std::map<int, torch::Tensor> clipCoefficients(const std::vector<int>& stepping, int j) const {
    std::map<int, torch::Tensor> out;
    if (c.clip_grad_norm <= 0) return out;
    std::map<int, torch::Tensor> squared;
    for (int s : stepping) {
      std::vector<torch::Tensor> grads;
      for (const auto& p : params[s])
        if (!later_copies.count(p.unsafeGetTensorImpl())) grads.push_back(p.grad());
      squared[s] = squaredNorm(grads, steps.gradient_factor[s].at(steps.step_of[s][j]), model.device);
    }
    if (!clipsWholeModel(c.plan.schedule.name)) {
      for (const auto& [s, sq] : squared) out[s] = clipCoefficient(sq, c.clip_grad_norm);
      return out;
    }
    torch::Tensor total = torch::zeros({1}, torch::dtype(torch::kFloat).device(model.device));
    for (const auto& [s, sq] : squared) total.add_(sq);
    for (int s : stepping) out[s] = clipCoefficient(total, c.clip_grad_norm);
    return out;
  }

  void step(int s, int v, const torch::Tensor& clip) {
    load(s, newest(s));
    const double factor = steps.gradient_factor[s].at(v);
    torch::NoGradGuard no_grad;
    for (auto& p : params[s]) {
      if (p.grad().defined() && factor != 1.0) p.grad().mul_(factor);
      if (p.grad().defined() && clip.defined()) p.grad().mul_(clip);
    }
    const bool t1 = latest && corrections.lr_warmup;
    // The rate schedule runs over the replay's steps of the stage, as over a run's.
    const double scheduled = c.lr_schedule.rate(c.lr, v - 1, static_cast<int64_t>(steps.combined[s].size()));
    setLearningRate(*optimizers[s], stepRate(scheduled, v - 1, t1 ? delays[s] : 0, corrections.warmup_steps));
    optimizers[s]->step();
    optimizers[s]->zero_grad();
    if (t2()) {  // delta <- gamma delta + (1 - gamma) (w_new - w_old), as the executor keeps it
      const double gamma = schedule::correctionDecay(corrections.decay, delays[s]);
      std::vector<torch::Tensor> delta = cloneTensors(velocity[s].at(newest(s)));
      const auto& old = versions[s].at(newest(s));
      for (std::size_t i = 0; i < delta.size(); ++i)
        delta[i].mul_(gamma).add_(params[s][i].detach() - old[i], 1 - gamma);
      velocity[s][v] = std::move(delta);
    }
    versions[s][v] = cloneTensors(params[s]);
  }

  // Drops the versions no micro-batch after `j` reads, but the newest: a long replay
  // holds a few versions, not one per step.
  void forgetUnread(int s, int j) {
    const int keep = newest(s);
    for (auto it = versions[s].begin(); it != versions[s].end();) {
      const auto read = last_read[s].find(it->first);
      const bool unread = read == last_read[s].end() || read->second <= j;
      if (it->first != keep && unread) {
        velocity[s].erase(it->first);
        it = versions[s].erase(it);
      } else {
        ++it;
      }
    }
  }
};

StalenessReplay::StalenessReplay(const TrainConfig& config, models::Model& model, int minibatches, int order_epoch)
    : impl_(std::make_unique<Impl>(config, model, minibatches, order_epoch)) {}

StalenessReplay::~StalenessReplay() = default;

int StalenessReplay::totalMicrobatches() const { return impl_->program.totalMicrobatches(); }

int64_t StalenessReplay::datasetSize() const { return impl_->train->size(); }

void StalenessReplay::run(int j) { impl_->run(j); }

void StalenessReplay::loadLatest() {
  for (int s = 0; s < impl_->ns; ++s) impl_->load(s, impl_->newest(s));
}

void StalenessReplay::trackDiscrepancy() {
  impl_->track_discrepancy = true;
  impl_->discrepancy.assign(impl_->ns, {});
}

std::vector<StalenessReplay::Discrepancy> StalenessReplay::discrepancy() const {
  std::vector<Discrepancy> out = impl_->discrepancy;
  for (Discrepancy& d : out)
    if (d.passes > 0) {
      d.stale = std::sqrt(d.stale / static_cast<double>(d.passes));
      d.corrected = std::sqrt(d.corrected / static_cast<double>(d.passes));
    }
  return out;
}

}  // namespace pipetrain::runtime
