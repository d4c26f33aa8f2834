#include "pipetrain/planner/calibration.h"

#include <algorithm>
#include <cmath>

#include "pipetrain/util/error.h"

namespace pipetrain::planner {
namespace {

constexpr const char* kFormat = "pipetrain.calibration";
constexpr int kVersion = 1;

// Below this an efficiency's noise is not credible: the repeat can land on the
// yardstick by luck.
constexpr double kMinNoise = 0.02;

json_io::Json curveToJson(const LossCurve& c) { return {{"samples", c.samples}, {"loss", c.loss}}; }

LossCurve curveFromJson(const json_io::JsonCursor& j) {
  j.allowOnly({"samples", "loss", "key", "description"});
  LossCurve c;
  for (const auto& s : j.field("samples").asArray()) c.samples.push_back(s.asNonNegativeInt());
  for (const auto& l : j.field("loss").asArray()) c.loss.push_back(l.asNumber());
  if (c.samples.empty() || c.samples.size() != c.loss.size())
    j.fail("a loss curve needs as many losses as sample counts, at least one");
  if (c.samples.front() != 0) j.fail("a loss curve starts at 0 samples (the initial weights' loss)");
  for (std::size_t i = 1; i < c.samples.size(); ++i)
    if (c.samples[i] <= c.samples[i - 1]) j.fail("a loss curve's sample counts must increase");
  return c;
}

}  // namespace

LossCurve LossCurve::bestSoFar() const {
  LossCurve best = *this;
  for (std::size_t i = 1; i < best.loss.size(); ++i) best.loss[i] = std::min(best.loss[i], best.loss[i - 1]);
  return best;
}

std::optional<double> LossCurve::samplesToReach(double target) const {
  const LossCurve best = bestSoFar();
  for (std::size_t i = 0; i < best.loss.size(); ++i) {
    if (best.loss[i] > target) continue;
    if (i == 0) return 0.0;
    const double above = best.loss[i - 1], below = best.loss[i];
    const double fraction = above > below ? (above - target) / (above - below) : 1.0;
    return static_cast<double>(best.samples[i - 1]) + fraction * static_cast<double>(best.samples[i] - best.samples[i - 1]);
  }
  return std::nullopt;
}

double Calibration::targetLoss() const {
  const auto it = curves.find(synchronous_key);
  if (it == curves.end()) throw Error("the calibration has no curve of the synchronous rule '" + synchronous_key + "'");
  return it->second.finalLoss();
}

namespace {

// Progress per sample of `curve` relative to the synchronous `yardstick`, both over
// `samples` samples.
double relativeProgress(const LossCurve& yardstick, const LossCurve& curve, int64_t samples) {
  const double target = yardstick.finalLoss();
  const double yardstick_samples = *yardstick.samplesToReach(target);
  if (const auto n = curve.samplesToReach(target)) return *n > 0 ? yardstick_samples / *n : HUGE_VAL;
  // Not reached: the samples the yardstick needed for the loss this rule did reach.
  const double reached = yardstick.samplesToReach(curve.finalLoss()).value_or(0.0);
  return reached / static_cast<double>(samples);
}

}  // namespace

double Calibration::noise() const {
  if (repeat.samples.size() < 2) return kMinNoise;
  const auto it = curves.find(synchronous_key);
  if (it == curves.end()) throw Error("the calibration has no curve of the synchronous rule '" + synchronous_key + "'");
  return std::max(kMinNoise, std::abs(1 - relativeProgress(it->second, repeat, samples)));
}

std::optional<Efficiency> efficiencyOf(const Calibration& c, const std::string& key) {
  const auto rule = c.curves.find(key);
  if (rule == c.curves.end()) return std::nullopt;
  const auto sync = c.curves.find(c.synchronous_key);
  if (sync == c.curves.end())
    throw Error("the calibration has no curve of the synchronous rule '" + c.synchronous_key + "'");
  const LossCurve& yardstick = sync->second;
  if (!(yardstick.finalLoss() < yardstick.loss.front()))
    throw Error("in calibration the synchronous rule's held-out loss never fell below its start (" +
                std::to_string(yardstick.loss.front()) + "): no progress to compare rules by; raise the budget "
                "(--calibration-seconds) or the learning rate");
  Efficiency e;
  e.reached = rule->second.samplesToReach(c.targetLoss()).has_value();
  e.value = relativeProgress(yardstick, rule->second, c.samples);
  const double noise = c.noise();
  e.low = e.value / (1 + noise);
  e.high = e.value * (1 + noise);
  return e;
}

json_io::Json Calibration::toJson() const {
  json_io::Json j = json_io::header(kFormat, kVersion);
  j["identity"] = identity;
  j["samples_per_rule"] = samples;
  j["synchronous"] = synchronous_key;
  json_io::Json rules = json_io::Json::array();
  for (const auto& [key, curve] : curves) {
    json_io::Json r = curveToJson(curve);
    r["key"] = key;
    const auto d = descriptions.find(key);
    r["description"] = d == descriptions.end() ? key : d->second;
    rules.push_back(r);
  }
  j["rules"] = rules;
  if (!repeat.samples.empty()) j["repeat"] = curveToJson(repeat);
  j["seconds"] = seconds;
  return j;
}

Calibration Calibration::fromJson(const json_io::Json& j, const std::string& origin) {
  const json_io::JsonCursor root(j, origin);
  json_io::checkHeader(root, kFormat, kVersion);
  root.allowOnly({"format", "version", "identity", "samples_per_rule", "synchronous", "rules", "repeat", "seconds"});
  Calibration c;
  c.identity = root.field("identity").node();
  c.samples = root.field("samples_per_rule").asIntIn(1, int64_t{1} << 50);
  c.synchronous_key = root.field("synchronous").asString();
  for (const auto& r : root.field("rules").asArray()) {
    const std::string key = r.field("key").asString();
    if (c.curves.count(key)) r.fail("rule '" + key + "' is given twice");
    c.curves[key] = curveFromJson(r);
    c.descriptions[key] = r.stringOr("description", key);
  }
  if (!c.curves.count(c.synchronous_key))
    root.field("synchronous").fail("no curve of the synchronous rule '" + c.synchronous_key + "' among the rules");
  if (root.has("repeat")) c.repeat = curveFromJson(root.field("repeat"));
  c.seconds = root.field("seconds").asSeconds();
  return c;
}

Calibration Calibration::load(const std::string& path) { return fromJson(json_io::readFile(path), path); }

}  // namespace pipetrain::planner
