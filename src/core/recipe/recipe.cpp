#include "pipetrain/recipe/recipe.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "pipetrain/util/error.h"
#include "pipetrain/util/text.h"

namespace pipetrain::recipe {
namespace {

constexpr double kPi = 3.14159265358979323846;

bool known(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string number(double x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", x);
  return buffer;
}

// Hugging Face Trainer.get_decay_parameter_names's patterns (transformers 5.x).
const std::vector<std::string> kHuggingFacePatterns = {"bias", "layernorm", "rmsnorm", "(^|\\.)norm($|\\.)",
                                                       "_norm($|\\.)"};

}  // namespace

double OptimizerOptions::weightDecay() const {
  if (weight_decay >= 0) return weight_decay;
  return name == "adamw" ? 0.01 : 0.0;
}

const std::vector<std::string>& optimizerNames() {
  static const std::vector<std::string> names = {"adam", "adamw", "sgd"};
  return names;
}

void checkOptimizer(const OptimizerOptions& o) {
  if (!known(optimizerNames(), o.name))
    throw Error("--optimizer must be one of " + text::joined(optimizerNames()) + ", not '" + o.name + "'");
  if (!std::isfinite(o.weight_decay) || (o.weight_decay < 0 && o.weight_decay != -1))
    throw Error("--weight-decay must be 0 or more, not " + number(o.weight_decay));
  auto beta = [](double b) { return std::isfinite(b) && b >= 0 && b < 1; };
  if (!beta(o.beta1) || !beta(o.beta2))
    throw Error("--betas must be two numbers in [0, 1), not " + number(o.beta1) + "," + number(o.beta2));
  if (!(std::isfinite(o.eps) && o.eps > 0)) throw Error("--eps must be above 0, not " + number(o.eps));
  if (!(std::isfinite(o.momentum) && o.momentum >= 0 && o.momentum < 1))
    throw Error("--momentum must be in [0, 1), not " + number(o.momentum));
  if (o.nesterov && (o.name != "sgd" || o.momentum <= 0))
    throw Error("--nesterov needs --optimizer sgd with --momentum above 0");
  if (o.name != "sgd" && o.momentum != OptimizerOptions{}.momentum)
    throw Error("--momentum is SGD's; " + o.name + " takes --betas");
  if (o.name == "sgd" && (o.beta1 != OptimizerOptions{}.beta1 || o.beta2 != OptimizerOptions{}.beta2 ||
                          o.eps != OptimizerOptions{}.eps))
    throw Error("--betas and --eps are Adam's and AdamW's; sgd takes --momentum");
  if (!o.no_decay.empty() && o.weightDecay() == 0)
    throw Error("--no-decay exempts parameters from a weight decay of 0: give --weight-decay");
  NoDecayRule rule(o.no_decay);  // a malformed expression fails here
}

NoDecayRule::NoDecayRule(const std::string& rule) : rule_(rule) {
  if (rule.empty()) return;
  if (rule == "1d") {
    by_dims_ = true;
    return;
  }
  std::vector<std::string> parts;
  if (rule == "hf") {
    parts = kHuggingFacePatterns;
  } else {
    std::size_t start = 0;
    while (start <= rule.size()) {
      const std::size_t comma = std::min(rule.find(',', start), rule.size());
      parts.push_back(rule.substr(start, comma - start));
      start = comma + 1;
    }
  }
  for (const std::string& p : parts) {
    if (p.empty()) throw Error("--no-decay '" + rule + "': an empty pattern");
    try {
      patterns_.emplace_back(lower(p), std::regex::ECMAScript | std::regex::optimize);
    } catch (const std::regex_error& e) {
      throw Error("--no-decay: '" + p + "' is not a regular expression (" + e.what() + ")");
    }
  }
}

bool NoDecayRule::exempts(const std::string& parameter_name, int64_t dims) const {
  if (by_dims_) return dims < 2;
  const std::string name = lower(parameter_name);
  return std::any_of(patterns_.begin(), patterns_.end(),
                     [&](const std::regex& p) { return std::regex_search(name, p); });
}

const std::vector<std::string>& scheduleNames() {
  static const std::vector<std::string> names = {"constant", "cosine", "linear", "step"};
  return names;
}

void checkSchedule(const LearningRateSchedule& s, double lr) {
  if (!(std::isfinite(lr) && lr >= 0)) throw Error("--lr must be 0 or more, not " + number(lr));
  if (!known(scheduleNames(), s.decay))
    throw Error("--lr-schedule must be one of " + text::joined(scheduleNames()) + ", not '" + s.decay + "'");
  if (s.warmup_steps < 0) throw Error("--lr-warmup must be 0 or more");
  if (!(std::isfinite(s.min_lr) && s.min_lr >= 0 && s.min_lr <= lr))
    throw Error("--lr-min must be between 0 and --lr (" + number(lr) + "), not " + number(s.min_lr));
  if (s.min_lr > 0 && s.decay == "constant")
    throw Error("--lr-min is the floor of a decay: give --lr-schedule cosine, linear or step");
  if (s.decay == "step" && s.step_size <= 0) throw Error("--lr-schedule step needs --lr-step-size above 0");
  if (s.decay != "step" && s.step_size != 0) throw Error("--lr-step-size is for --lr-schedule step");
  if (!(std::isfinite(s.gamma) && s.gamma > 0 && s.gamma <= 1))
    throw Error("--lr-gamma must be in (0, 1], not " + number(s.gamma));
}

double LearningRateSchedule::rate(double lr, int64_t step, int64_t total_steps) const {
  if (step < warmup_steps) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  const int64_t length = total_steps - warmup_steps;
  if (decay == "constant" || length <= 0) return lr;
  const int64_t into = std::min(step - warmup_steps, length);
  const double done = static_cast<double>(into) / static_cast<double>(length);
  if (decay == "cosine") return min_lr + (lr - min_lr) * (1 + std::cos(kPi * done)) / 2;
  if (decay == "linear") return lr + (min_lr - lr) * done;
  if (decay == "step") return std::max(min_lr, lr * std::pow(gamma, static_cast<double>(into / step_size)));
  throw Error("--lr-schedule: unknown '" + decay + "'");
}

void checkClipNorm(double max_norm) {
  if (!(std::isfinite(max_norm) && max_norm >= 0))
    throw Error("--clip-grad-norm must be above 0, not " + number(max_norm));
}

json_io::Json recipeToJson(const OptimizerOptions& o, double lr, const LearningRateSchedule& s,
                           double clip_grad_norm) {
  json_io::Json optimizer = {{"name", o.name}, {"weight_decay", o.weightDecay()}};
  if (o.name == "sgd") {
    optimizer["momentum"] = o.momentum;
    optimizer["nesterov"] = o.nesterov;
  } else {
    optimizer["betas"] = {o.beta1, o.beta2};
    optimizer["eps"] = o.eps;
  }
  if (!o.no_decay.empty()) optimizer["no_decay"] = o.no_decay;
  json_io::Json schedule = {{"decay", s.decay}, {"warmup_steps", s.warmup_steps}};
  if (s.decay != "constant") schedule["min_lr"] = s.min_lr;
  if (s.decay == "step") {
    schedule["step_size"] = s.step_size;
    schedule["gamma"] = s.gamma;
  }
  return {{"optimizer", optimizer}, {"lr", lr}, {"lr_schedule", schedule}, {"clip_grad_norm", clip_grad_norm}};
}

Recipe recipeFromJson(const json_io::JsonCursor& j) {
  j.allowOnly({"optimizer", "lr", "lr_schedule", "clip_grad_norm"});
  Recipe r;
  const json_io::JsonCursor o = j.field("optimizer");
  o.allowOnly({"name", "weight_decay", "momentum", "nesterov", "betas", "eps", "no_decay"});
  r.optimizer.name = o.field("name").asString();
  r.optimizer.weight_decay = o.field("weight_decay").asNumber();
  r.optimizer.momentum = o.numberOr("momentum", r.optimizer.momentum);
  r.optimizer.nesterov = o.boolOr("nesterov", r.optimizer.nesterov);
  if (o.has("betas")) {
    const std::vector<json_io::JsonCursor> betas = o.field("betas").asArray();
    if (betas.size() != 2) o.field("betas").fail("expected two numbers");
    r.optimizer.beta1 = betas[0].asNumber();
    r.optimizer.beta2 = betas[1].asNumber();
  }
  r.optimizer.eps = o.numberOr("eps", r.optimizer.eps);
  r.optimizer.no_decay = o.stringOr("no_decay", "");
  r.lr = j.field("lr").asNumber();
  const json_io::JsonCursor s = j.field("lr_schedule");
  s.allowOnly({"decay", "warmup_steps", "min_lr", "step_size", "gamma"});
  r.lr_schedule.decay = s.field("decay").asString();
  r.lr_schedule.warmup_steps = s.field("warmup_steps").asNonNegativeInt();
  r.lr_schedule.min_lr = s.numberOr("min_lr", r.lr_schedule.min_lr);
  if (s.has("step_size")) r.lr_schedule.step_size = s.field("step_size").asNonNegativeInt();
  r.lr_schedule.gamma = s.numberOr("gamma", r.lr_schedule.gamma);
  r.clip_grad_norm = j.field("clip_grad_norm").asNumber();
  return r;
}

}  // namespace pipetrain::recipe
