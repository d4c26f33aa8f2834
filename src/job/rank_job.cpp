#include "pipetrain/job/rank_job.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "pipetrain/job/rank_report.h"
#include "pipetrain/torch/device.h"
#include "pipetrain/torch/transport.h"
#include "pipetrain/util/error.h"

namespace pipetrain::job {
namespace {

using json_io::Json;

// --log-jsonl: the reporting rank's JSON line per mini-batch ("step") and per evaluation
// ("eval"), flushed as they happen so a user can follow the file (docs/report.md).
// A resumed run (a restart and an elastic shrink among them) goes on with the log it had,
// and with its clock: its times continue from the last one logged, so the report's
// charts run on instead of drawing back to 0 (the time the job spent restarting is left
// out; the summary's wall time holds it).
class MetricsLog {
 public:
  MetricsLog(std::string path, bool resumed) : path_(std::move(path)), resumed_(resumed) {}
  void write(const runtime::Progress& p) {
    if (path_.empty()) return;
    if (!out_.is_open()) {
      if (resumed_) clock_offset_ = lastLoggedSeconds(path_);
      out_.open(path_, resumed_ ? std::ios::app : std::ios::trunc);
      if (!out_) throw Error("--log-jsonl " + path_ + ": cannot write the file");
    }
    Json line;
    if (p.eval) {
      line = report::evaluationToJson(evaluationOf(*p.eval));
      line["event"] = "eval";
      line["wall_seconds"] = clock_offset_ + p.eval->wall_seconds;
    } else {
      line = {{"event", "step"}, {"epoch", p.epoch + 1}, {"step", p.step}, {"steps", p.steps}, {"loss", p.loss},
              {"samples_per_second", p.samples_per_second}, {"wall_seconds", clock_offset_ + p.wall_seconds}};
      if (!std::isnan(p.grad_norm)) line["grad_norm"] = p.grad_norm;
    }
    out_ << line.dump() << "\n" << std::flush;
  }

 private:
  // The latest wall_seconds in the log at `path`; 0 where it has none (or no file).
  static double lastLoggedSeconds(const std::string& path) {
    std::ifstream in(path);
    double last = 0;
    for (std::string text; std::getline(in, text);) {
      const Json line = Json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (line.is_object() && line.contains("wall_seconds") && line["wall_seconds"].is_number())
        last = std::max(last, line["wall_seconds"].get<double>());
    }
    return last;
  }

  std::string path_;
  bool resumed_;
  double clock_offset_ = 0;
  std::ofstream out_;
};

// To the launcher at most this often, and at an epoch's end, so that mini-batches of a
// few milliseconds do not wake it hundreds of times a second on the ranks' cores (the
// display is no slower; on the byo example the throughput moved within noise).
constexpr std::chrono::milliseconds kProgressInterval{100};

}  // namespace

bool startedByLauncher() { return std::getenv("PIPETRAIN_LAUNCHED") != nullptr; }

std::optional<runtime::Checkpoint> resolveResume(runtime::TrainConfig& config, const Say& say) {
  std::optional<runtime::Checkpoint> from = runtime::checkpointToResume(config.resume, config.checkpoint_dir);
  if (say && from)
    say(formatted("resuming from %s: %lld mini-batches trained", from->dir.c_str(),
                  static_cast<long long>(from->manifest.position.minibatches)));
  else if (say && !config.resume.empty())
    say("no checkpoint in " + config.resume + " yet: training from the start");
  config.resume = from ? from->dir : "";
  return from;
}

runtime::RankResult runRank(TrainRequest& request, const std::function<void(const runtime::Progress&)>& on_progress) {
  runtime::Rendezvous rv = runtime::Rendezvous::fromEnvironment();
  rv.timeout = std::chrono::seconds(request.ranks.timeout_seconds);
  if (request.ranks.plan_rank >= 0) rv.rank = request.ranks.plan_rank;
  runtime::TrainConfig& config = request.config;
  if (const char* t = std::getenv("OMP_NUM_THREADS"); t && config.threads == 0) config.threads = std::atoi(t);
  const bool launched = startedByLauncher();
  auto transport = runtime::makeGlooTransport(rv);
  // NCCL carries the data between ranks on GPUs of their own; Gloo always coordinates.
  const torch::Device device = runtime::rankDevice(config.device, runtime::localRank(transport->rank()));
  const std::unique_ptr<runtime::DataChannel> channel =
      runtime::openDataChannel(request.ranks.wire, rv, device, *transport);
  runtime::DataChannel& data = channel ? *channel : static_cast<runtime::DataChannel&>(*transport);
  MetricsLog log(request.outputs.log_jsonl, !config.resume.empty());
  auto last_progress = std::chrono::steady_clock::now();
  runtime::RankResult result = runtime::trainRank(config, data, *transport, [&](const runtime::Progress& p) {
    if (p.reports) log.write(p);
    if (p.eval || !p.reports) return;
    // The loss is the last stage's: rank 0's under a V schedule.
    const auto now = std::chrono::steady_clock::now();
    if (!launched) {
      on_progress(p);
    } else if (p.step == p.steps || now - last_progress >= kProgressInterval) {
      last_progress = now;
      std::printf("%s\n", progressReportLine({p.epoch, p.step, p.steps, p.loss, p.samples_per_second}).c_str());
      std::fflush(stdout);
    }
  });
  if (launched) {
    std::printf("%s%s\n", kResultPrefix, rankResultToJson(result).dump().c_str());
    std::fflush(stdout);
  }
  return result;
}

}  // namespace pipetrain::job
