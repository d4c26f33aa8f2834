// The baseline of pipetrain's efficiency on one device: a plain LibTorch training loop
// of a zoo model, as a user would write it (batch from the dataset, to the device,
// forward under autocast, loss, backward, Adam's fused step), with nothing of pipetrain's
// runtime; --pin-memory copies the batch as a careful user would. scripts/device_check.sh runs it beside `pipetrain train --nproc 1` on the
// same model, data, batch and precision and compares their throughputs.
//
//   plain_loop --model gpt --model-option layers=12 ... --batch 8 --steps 30 --warmup 5
//              --device cuda --precision bf16
// prints one JSON line: samples/s and tokens/s over the timed steps, the model's
// parameter count and its final loss.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <torch/cuda.h>
#include <torch/torch.h>

#include "pipetrain/torch/data.h"
#include "pipetrain/torch/device.h"
#include "pipetrain/torch/precision.h"
#include "pipetrain/torch/trainer.h"
#include "pipetrain/util/error.h"
#include "../src/torch/runtime/optimizer_state.h"
#include "../src/torch/runtime/torch_trace.h"

using namespace pipetrain;

int main(int argc, char** argv) {
  CLI::App app{"A plain LibTorch training loop: the baseline of pipetrain's one-device efficiency"};
  std::string model = "gpt", device_name = "auto", precision_name = "fp32";
  std::vector<std::string> options;
  int64_t batch = 8, steps = 30, warmup = 5, synthetic_size = 4096;
  double lr = 1e-3;
  bool pin_memory = false;
  std::string trace;
  app.add_option("--model", model);
  app.add_option("--model-option", options, "KEY=N");
  app.add_option("--batch", batch);
  app.add_option("--steps", steps, "timed steps")->check(CLI::Range(1, 1000000000));
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::Range(0, 1000000000));
  app.add_option("--device", device_name);
  app.add_option("--precision", precision_name);
  app.add_option("--synthetic-size", synthetic_size);
  app.add_option("--lr", lr);
  app.add_option("--trace", trace, "FILE: a Chrome trace of the last two timed steps (LibTorch's profiler)");
  app.add_flag("--pin-memory", pin_memory,
               "copy each batch through pinned memory without waiting (as DataLoader(pin_memory=True) and "
               "non_blocking=True do); without it, the plain .to(device) of a first loop");
  CLI11_PARSE(app, argc, argv);
  try {
    models::ModelConfig config;
    for (const std::string& kv : options) {
      const auto eq = kv.find('=');
      if (eq == std::string::npos) throw Error("--model-option " + kv + ": expected KEY=N");
      config[kv.substr(0, eq)] = std::stoll(kv.substr(eq + 1));
    }
    const torch::Device device = runtime::rankDevice(device_name, 0);
    const runtime::Precision precision = runtime::parsePrecision(precision_name);
    data::DataOptions data_options;
    data_options.synthetic_size = synthetic_size;
    models::Model m = runtime::openModel(model, config, 0, "", data_options);
    models::moveTo(m, device);
    const auto params = m.parameters(0, static_cast<int>(m.layers.size()));
    int64_t parameter_count = 0;
    for (const auto& p : params) parameter_count += p.numel();
    // Training's own Adam: on a GPU one fused kernel per step (at::_fused_adam_), as
    // torch.optim.Adam(fused=True) in bench/device/torch_loop.py.
    const auto optimizer_ptr = runtime::makeOptimizer(recipe::OptimizerOptions{}, lr, params);
    torch::optim::Optimizer& optimizer = *optimizer_ptr;
    const auto dataset = data::openDataset(data_options, m.input);
    const data::SampleOrder order(dataset->size(), 0, 0);
    const int64_t per_epoch = order.minibatchesPerEpoch(batch, 1);

    auto sync = [&] {
      if (device.is_cuda()) torch::cuda::synchronize(device.index());
    };
    runtime::TorchTrace traced(trace, warmup + steps - 2, 2);
    double loss_value = 0;
    std::chrono::steady_clock::time_point start;
    for (int64_t step = 0; step < warmup + steps; ++step) {
      if (step == warmup) {
        sync();
        start = std::chrono::steady_clock::now();
      }
      const data::Batch b = dataset->get(order.microbatch(step % per_epoch, 0, batch, 1));
      optimizer.zero_grad();
      torch::Tensor loss;
      {
        runtime::AutocastScope autocast(precision, device);
        auto toDevice = [&](const torch::Tensor& t) {
          return pin_memory && device.is_cuda() ? t.pin_memory().to(device, /*non_blocking=*/true) : t.to(device);
        };
        loss = models::lossOf(m, models::forwardModel(m, toDevice(b.inputs)), toDevice(b.labels));
      }
      loss.backward();
      optimizer.step();
      if (step == warmup + steps - 1) loss_value = loss.item<double>();
      traced.stepDone(step + 1);
    }
    sync();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double samples_per_second = static_cast<double>(steps * batch) / seconds;
    const bool tokens = m.input.kind == models::InputKind::kTokens;
    const double per_sample = tokens ? static_cast<double>(m.input.sample_shape.front()) : 1.0;
    std::printf("{\"model\": \"%s\", \"device\": \"%s\", \"precision\": \"%s\", \"batch\": %lld, \"steps\": %lld, "
                "\"seconds\": %.4f, \"samples_per_second\": %.3f, \"tokens_per_second\": %.1f, "
                "\"parameters\": %lld, \"final_loss\": %.5f, \"pin_memory\": %s}\n",
                model.c_str(), runtime::describeDevice(device).c_str(), runtime::precisionName(precision),
                static_cast<long long>(batch), static_cast<long long>(steps), seconds, samples_per_second,
                tokens ? samples_per_second * per_sample : 0.0, static_cast<long long>(parameter_count), loss_value, pin_memory ? "true" : "false");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plain_loop: %s\n", e.what());
    return 1;
  }
}
