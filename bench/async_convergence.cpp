// How the asynchronous rules converge against synchronous training, at pipeline depths
// two cores cannot run as processes: each rule replayed exactly in one process
// (runtime/staleness_replay.h, the reference the pipelined executor is tested to match),
// a 1-stage-per-layer-run chain over `--stages`, the held-out accuracy and loss on the
// whole test split after each epoch. Prints a Markdown table per configuration.
// Build: cmake --build build --target async_convergence (not built by default).
// Run:   build/async_convergence --model fmnist-cnn --stages 4 --microbatches 2 --microbatch-size 128 \
//          --epochs 5 --configs 1f1b,pipemare,pipemare-t1,pipemare-off,2bw,pipedream
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <CLI/CLI.hpp>

#include "../src/torch/runtime/staleness_replay.h"
#include "pipetrain/plan/partition.h"
#include "pipetrain/plan/plan_program.h"
#include "pipetrain/util/error.h"

using namespace pipetrain;

namespace {

struct Args {
  std::string model = "fmnist-cnn", dataset = "fashion-mnist", optimizer = "adam";
  std::vector<std::string> model_options, configs{"1f1b", "pipemare", "pipemare-off", "2bw", "pipedream"};
  int stages = 4, microbatches = 2, epochs = 5, warmup = -1;
  int64_t lr_warmup = 0;
  int64_t microbatch_size = 128;
  double lr = 1e-3, momentum = 0.9;
  uint64_t seed = 1;
  bool discrepancy = false;
};

// A configuration's schedule options: "pipemare" (T1 and T2), "pipemare-t1",
// "pipemare-off", "pipedream-vs", or a schedule's own name.
plan::ScheduleOptions optionsOf(const std::string& config, int warmup) {
  plan::ScheduleOptions o;
  o.name = config.rfind("pipemare", 0) == 0 ? "pipemare" : config == "pipedream-vs" ? "pipedream" : config;
  o.vertical_sync = config == "pipedream-vs";
  o.pipemare_lr_warmup = config == "pipemare" || config == "pipemare-t1";
  o.pipemare_correction = config == "pipemare";
  if (warmup >= 0) o.pipemare_warmup_steps = warmup;
  return o;
}

std::pair<double, double> evaluate(const models::Model& model, const data::Dataset& test) {
  torch::NoGradGuard no_grad;
  double loss = 0, correct = 0;
  const int64_t n = test.size(), chunk = 1000;
  for (int64_t first = 0; first < n; first += chunk) {
    std::vector<int64_t> idx;
    for (int64_t i = first; i < std::min(n, first + chunk); ++i) idx.push_back(i);
    const data::Batch b = test.get(idx);
    const torch::Tensor out = models::forwardModel(model, b.inputs);
    loss += models::lossOf(model, out, b.labels).item<double>() * static_cast<double>(idx.size());
    correct += static_cast<double>(models::correctPredictions(model, out, b.labels));
  }
  return {correct / static_cast<double>(n), loss / static_cast<double>(n)};
}

int run(const Args& a) {
  runtime::TrainConfig c;
  c.model = a.model;
  for (const std::string& kv : a.model_options) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) throw Error("--model-option takes KEY=INTEGER, got '" + kv + "'");
    c.model_config[kv.substr(0, eq)] = std::stoll(kv.substr(eq + 1));
  }
  c.data.name = a.dataset;
  c.optimizer.name = a.optimizer;
  c.lr = a.lr;
  c.optimizer.momentum = a.momentum;
  c.lr_schedule.warmup_steps = a.lr_warmup;
  c.seed = a.seed;
  const models::Model probe = runtime::openModel(c);
  std::vector<std::string> names;
  for (const auto& l : probe.layers) names.push_back(l.name);
  const std::vector<int> bounds = plan::balancedChainSplit(std::vector<double>(names.size(), 1.0), a.stages);
  data::DataOptions test_options = c.data;
  test_options.split = "test";
  const auto test = data::openDataset(test_options, probe.input);
  const int64_t per_epoch = data::openDataset(c.data, probe.input)->size() / (a.microbatch_size * a.microbatches);
  std::printf("%s on %s, %d stages, %d x %lld per step, %s lr %g (warm-up %lld steps), seed %llu; test accuracy (loss) "
              "after each epoch\n\n",
              a.model.c_str(), a.dataset.c_str(), a.stages, a.microbatches, static_cast<long long>(a.microbatch_size),
              a.optimizer.c_str(), a.lr, static_cast<long long>(a.lr_warmup), static_cast<unsigned long long>(a.seed));
  std::printf("| configuration | stage delays |");
  for (int e = 1; e <= a.epochs; ++e) std::printf(" epoch %d |", e);
  std::printf(" seconds |%s\n|---|---|", a.discrepancy ? " distance of backward from forward weights: w, u |" : "");
  for (int e = 0; e <= a.epochs; ++e) std::printf("--:|");
  if (a.discrepancy) std::printf("---|");
  std::printf("\n");
  std::fflush(stdout);
  for (const std::string& config : a.configs) {
    c.plan = plan::chainPlan(names, bounds, {}, optionsOf(config, a.warmup), a.microbatch_size, a.microbatches);
    const schedule::Program program = plan::programForPlan(c.plan, plan::stageDag(c.plan, probe.layerGraph()), 4);
    std::string delays;
    for (int d : schedule::stageDelays(program)) delays += (delays.empty() ? "" : ",") + std::to_string(d);
    if (!schedule::traits(c.plan.schedule.name).asynchronous) delays = "0 (synchronous)";
    models::Model model = runtime::openModel(c);
    const auto start = std::chrono::steady_clock::now();
    runtime::StalenessReplay replay(c, model, static_cast<int>(per_epoch * a.epochs));
    if (a.discrepancy) replay.trackDiscrepancy();
    std::printf("| %s | %s |", config.c_str(), delays.c_str());
    const int per_epoch_microbatches = static_cast<int>(per_epoch) * a.microbatches;
    for (int j = 0; j < replay.totalMicrobatches(); ++j) {
      replay.run(j);
      if ((j + 1) % per_epoch_microbatches != 0) continue;
      replay.loadLatest();
      const auto [accuracy, loss] = evaluate(model, *test);
      if (std::isfinite(loss))
        std::printf(" %.4f (%.3f) |", accuracy, loss);
      else
        std::printf(" diverged |");
      std::fflush(stdout);
    }
    std::printf(" %.0f |", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (a.discrepancy) {
      // Per stage: the RMS distance of the current weights w, and of T2's u, from the
      // weights the forward pass read, over the backward passes that read later weights.
      std::string cell;
      for (const auto& d : replay.discrepancy())
        if (d.passes > 0) {
          char buf[64];
          std::snprintf(buf, sizeof buf, "%s%.3g, %.3g", cell.empty() ? "" : "; ", d.stale, d.corrected);
          cell += buf;
        }
      std::printf(" %s |", cell.empty() ? "none stale" : cell.c_str());
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Asynchronous rules against synchronous training, replayed in one process"};
  app.add_option("--model", a.model)->capture_default_str();
  app.add_option("--model-option", a.model_options, "KEY=INTEGER");
  app.add_option("--dataset", a.dataset)->capture_default_str();
  app.add_option("--stages", a.stages)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--microbatches", a.microbatches)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--microbatch-size", a.microbatch_size)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--epochs", a.epochs)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--optimizer", a.optimizer, "adam or sgd (with momentum)")->capture_default_str();
  app.add_option("--lr", a.lr)->capture_default_str();
  app.add_option("--momentum", a.momentum)->capture_default_str();
  app.add_option("--lr-warmup", a.lr_warmup, "linear learning-rate warm-up, optimizer steps per stage")
      ->capture_default_str();
  app.add_option("--pipemare-warmup", a.warmup, "T1's K (default: the schedule's)");
  app.add_option("--seed", a.seed)->capture_default_str();
  app.add_flag("--discrepancy", a.discrepancy,
               "print, per stage, how far the backward passes' weights (w, and T2's u) were from their forward's");
  app.add_option("--configs", a.configs, "1f1b, gpipe, pipedream, pipedream-vs, 2bw, pipemare, pipemare-t1, pipemare-off")
      ->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "async_convergence: %s\n", e.what());
    return 1;
  }
}
