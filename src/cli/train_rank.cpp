#include "train_rank.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "pipetrain/schedule/action.h"
#include "pipetrain/torch/device.h"
#include "pipetrain/torch/transport.h"
#include "pipetrain/trace/timeline_json.h"
#include "pipetrain/util/error.h"

namespace pipetrain::cli {

using json_io::Json;

namespace {

// One evaluation, as the summary's history and the metrics log both write it.
Json evalJson(const runtime::EvalPoint& e) {
  return {{"epoch", e.epoch},
          {"samples", e.samples},
          {"train_seconds", e.train_seconds},
          {"wall_seconds", e.wall_seconds},
          {"test_accuracy", e.test_accuracy},
          {"test_loss", e.test_loss}};
}

Json actionSecondsJson(const std::vector<runtime::RankResult::ActionSeconds>& all) {
  Json out = Json::array();
  for (const auto& a : all)
    out.push_back({{"stage", a.stage}, {"type", schedule::name(a.type)}, {"seconds", a.seconds},
                   {"cpu_seconds", a.cpu_seconds}});
  return out;
}

// --log-jsonl: the reporting rank's JSON line per mini-batch ("step") and per evaluation
// ("eval"), flushed as they happen so a user can follow the file (docs/report.md).
class MetricsLog {
 public:
  explicit MetricsLog(std::string path) : path_(std::move(path)) {}
  void write(const runtime::Progress& p) {
    if (path_.empty()) return;
    if (!out_.is_open()) {
      out_.open(path_, std::ios::trunc);
      if (!out_) throw Error("--log-jsonl " + path_ + ": cannot write the file");
    }
    Json line;
    if (p.eval) {
      line = evalJson(*p.eval);
      line["event"] = "eval";
    } else {
      line = {{"event", "step"}, {"epoch", p.epoch + 1}, {"step", p.step}, {"steps", p.steps}, {"loss", p.loss},
              {"samples_per_second", p.samples_per_second}, {"wall_seconds", p.wall_seconds}};
    }
    out_ << line.dump() << "\n" << std::flush;
  }

 private:
  std::string path_;
  std::ofstream out_;
};

Json historyJson(const std::vector<runtime::EvalPoint>& history) {
  Json out = Json::array();
  for (const auto& e : history) out.push_back(evalJson(e));
  return out;
}

}  // namespace

Json resultToJson(const runtime::RankResult& r) {
  return {{"rank", r.rank},
          {"stages", r.stages},
          {"last_stage", r.last_stage},
          {"final_loss", r.final_loss},
          {"test_accuracy", r.test_accuracy},
          {"samples", r.samples},
          {"train_seconds", r.train_seconds},
          {"busy_seconds", r.busy_seconds},
          {"allreduce_seconds", r.allreduce_seconds},
          {"wait_seconds", r.wait_seconds},
          {"core_wait_seconds", r.core_wait_seconds},
          {"core_run_seconds", r.core_run_seconds},
          {"test_loss", r.test_loss},
          {"history", historyJson(r.history)},
          {"peak_memory_bytes", r.peak_memory_bytes},
          {"start_memory_bytes", r.start_memory_bytes},
          {"data_memory_bytes", r.data_memory_bytes},
          {"device", r.device},
          {"data_channel", r.data_channel},
          {"peak_device_memory_bytes", r.peak_device_memory_bytes},
          {"weight_versions", r.weight_versions},
          {"weight_bytes", r.weight_bytes},
          {"stage_param_bytes", r.stage_param_bytes},
          {"stage_output_bytes", r.stage_output_bytes},
          {"stage_preds", r.stage_preds},
          {"last_step", trace::actionsToJson(r.last_step)},
          {"action_seconds", actionSecondsJson(r.action_seconds)}};
}

std::string progressLine(int epoch, long long step, long long steps, double loss, double samples_per_second,
                         int64_t samples_per_step) {
  const double eta = samples_per_second > 0 ? (steps - step) * samples_per_step / samples_per_second : 0;  // this epoch
  char buf[200];
  std::snprintf(buf, sizeof buf, "epoch %d  step %lld/%lld  loss %.4f  %.0f samples/s  ETA %.0f s", epoch + 1, step,
                steps, loss, samples_per_second, eta);
  return buf;
}

bool plainLineDue(long long step, long long steps, std::chrono::steady_clock::time_point& last) {
  if (std::chrono::steady_clock::now() - last <= std::chrono::seconds(10) && step != steps) return false;
  last = std::chrono::steady_clock::now();
  return true;
}

std::optional<runtime::Checkpoint> resolveResume(runtime::TrainConfig& config, bool say) {
  std::optional<runtime::Checkpoint> from = runtime::checkpointToResume(config.resume, config.checkpoint_dir);
  if (say && from)
    std::printf("resuming from %s: %lld mini-batches trained\n", from->dir.c_str(),
                static_cast<long long>(from->manifest.position.minibatches));
  else if (say && !config.resume.empty())
    std::printf("no checkpoint in %s yet: training from the start\n", config.resume.c_str());
  std::fflush(stdout);
  config.resume = from ? from->dir : "";
  return from;
}

constexpr std::chrono::milliseconds kProgressInterval{100};

int runRank(TrainArgs& a) {
  runtime::Rendezvous rv = runtime::Rendezvous::fromEnvironment();
  rv.timeout = std::chrono::seconds(a.timeout_seconds);
  if (const char* t = std::getenv("OMP_NUM_THREADS"); t && a.config.threads == 0) a.config.threads = std::atoi(t);
  const bool launched = std::getenv("PIPETRAIN_LAUNCHED") != nullptr;
  auto transport = runtime::makeGlooTransport(rv);
  // NCCL carries the data between ranks on GPUs of their own; Gloo always coordinates.
  const torch::Device device = runtime::rankDevice(a.config.device, runtime::localRank(transport->rank()));
  const std::unique_ptr<runtime::DataChannel> nccl = runtime::openDataChannel(a.wire, rv, device, *transport);
  runtime::DataChannel& data = nccl ? *nccl : static_cast<runtime::DataChannel&>(*transport);
  // Under the launcher, it has said so; under torchrun every start of a job runs this.
  resolveResume(a.config, !launched && transport->rank() == 0);
  MetricsLog log(a.log_jsonl);
  auto last_plain = std::chrono::steady_clock::now(), last_progress = last_plain;
  const auto result = runtime::trainRank(a.config, data, *transport, [&](const runtime::Progress& p) {
    if (p.reports) log.write(p);
    if (p.eval) return;
    // The loss is the last stage's: rank 0's under a V schedule. To the launcher at most
    // every kProgressInterval and at an epoch's end, so that mini-batches of a few
    // milliseconds do not wake it hundreds of times a second on the ranks' cores (the
    // display is no slower; on the byo example the throughput moved within noise).
    const auto now = std::chrono::steady_clock::now();
    if (launched && p.reports && (p.step == p.steps || now - last_progress >= kProgressInterval)) {
      last_progress = now;
      std::printf("PROGRESS %d %lld %lld %.6f %.3f\n", p.epoch, static_cast<long long>(p.step),
                  static_cast<long long>(p.steps), p.loss, p.samples_per_second);
    } else if (!launched && p.reports && plainLineDue(p.step, p.steps, last_plain))
      std::printf("%s\n", progressLine(p.epoch, p.step, p.steps, p.loss, p.samples_per_second,
                                        a.config.plan.samplesPerMinibatch()).c_str());
    std::fflush(stdout);
  });
  if (launched) {
    std::printf("RESULT %s\n", resultToJson(result).dump().c_str());
  } else {
    std::printf("rank %d: stages", result.rank);
    for (int s : result.stages) std::printf(" %d", s);
    std::printf(", %lld samples in %.2f s, bubble %.1f%%%s\n", static_cast<long long>(result.samples),
                result.train_seconds, 100 * (1 - result.busy_seconds / result.train_seconds),
                result.last_stage ? (", loss " + std::to_string(result.final_loss)).c_str() : "");
    if (result.test_accuracy >= 0) std::printf("test accuracy %.4f\n", result.test_accuracy);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace pipetrain::cli
