#include "pipetrain/job/run_summary.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>

#include "pipetrain/job/run_prediction.h"
#include "pipetrain/job/run_profile.h"
#include "pipetrain/planner/update_rule.h"
#include "pipetrain/recipe/recipe.h"
#include "pipetrain/report/pages.h"
#include "pipetrain/report/run_page.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/trace/chrome_trace.h"
#include "pipetrain/trace/svg_gantt.h"

namespace pipetrain::job {
namespace {

using json_io::Json;

// The ranks' steady-state action times (RankResult::action_seconds) per stage and type,
// of wall time or of time on a core, each stage's at its slowest replica's pace.
plan::StageSeconds stageSeconds(const std::vector<runtime::RankResult>& ranks, bool on_a_core) {
  std::vector<RankSeconds> per_rank;
  for (const runtime::RankResult& r : ranks) {
    RankSeconds& mine = per_rank.emplace_back();
    for (const auto& a : r.action_seconds) mine.seconds[{a.stage, a.type}] = on_a_core ? a.cpu_seconds : a.seconds;
    mine.minibatch_busy = on_a_core ? r.minibatch_busy_cpu_seconds : r.minibatch_busy_seconds;
  }
  return slowestReplicaSeconds(per_rank);
}

// A rank's time in training steps that was neither compute, waiting for messages nor
// all-reducing: the framework's, its sends' included.
double frameworkSeconds(const runtime::RankResult& r) {
  return std::max(0.0, r.train_seconds - r.busy_seconds - r.wait_seconds - r.allreduce_seconds);
}

// The same per action the rank ran (MeasuredRun::framework_seconds_per_action).
double frameworkSecondsPerAction(const runtime::RankResult& r) {
  return r.actions_run > 0 ? frameworkSeconds(r) / static_cast<double>(r.actions_run) : 0.0;
}

std::vector<double> frameworkSecondsPerAction(const std::vector<runtime::RankResult>& ranks) {
  std::vector<double> out;
  for (const runtime::RankResult& r : ranks) out.push_back(frameworkSecondsPerAction(r));
  return out;
}

// A rank's entry in the summary: where its step went, its memory and weights.
report::RankSummary rankEntry(const runtime::RankResult& r) {
  const double train = r.train_seconds;
  const auto share = [&](double seconds) { return train > 0 ? seconds / train : 0; };
  report::RankSummary e;
  e.rank = r.rank;
  e.stages = r.stages;
  e.bubble_fraction = train > 0 ? 1 - r.busy_seconds / train : 0;
  e.wait_fraction = share(r.wait_seconds);
  e.allreduce_fraction = share(r.allreduce_seconds);
  // Time in a step that is neither compute, nor waiting for messages or the all-reduce:
  // the framework.
  e.overhead_fraction = share(frameworkSeconds(r));
  e.framework_seconds_per_action = frameworkSecondsPerAction(r);
  // Lost to other processes on the same cores, inside compute or not, and the training
  // thread's time on a core (its work, whatever the sharing); -1 = unknown.
  e.core_wait_fraction = r.core_wait_seconds < 0 ? -1.0 : share(r.core_wait_seconds);
  e.core_run_fraction = r.core_run_seconds < 0 ? -1.0 : share(r.core_run_seconds);
  e.probe_seconds = r.probe_seconds;
  e.peak_memory_bytes = r.peak_memory_bytes;
  e.start_memory_bytes = r.start_memory_bytes;
  e.data_memory_bytes = r.data_memory_bytes;
  e.heap_free_bytes = r.heap_free_bytes;
  e.device = r.device;
  e.data_channel = r.data_channel;
  e.heap = r.heap;
  e.peak_device_memory_bytes = r.peak_device_memory_bytes;
  e.weight_versions = r.weight_versions;
  e.weight_bytes = r.weight_bytes;
  e.action_seconds = actionTimesOf(r.action_seconds);
  return e;
}

// The ranks' typical mini-batch of their last few: they were timed from one shared
// origin (runtime::sharedOrigin), so one shift aligns them all.
trace::Timeline measuredTimeline(const TrainRequest& request, const std::vector<runtime::RankResult>& ranks) {
  const plan::Plan& plan = request.config.plan;
  std::vector<std::vector<std::vector<trace::TimedAction>>> recent;
  for (const runtime::RankResult& r : ranks) recent.push_back(r.recent_steps);
  trace::Timeline timeline;
  timeline.title = request.config.model + ", " + plan.schedule.name + ", " + std::to_string(ranks.size()) +
                   " ranks, " + std::to_string(plan.microbatches) +
                   " micro-batches (the median by duration of the last mini-batches)";
  timeline.source = "measured";
  timeline.ranks = trace::typicalMinibatch(recent);
  return timeline;
}

std::vector<std::string> trainingNotes(const TrainRequest& request, const models::Model& model,
                                       const planner::UpdateRule& rule) {
  const plan::Plan& plan = request.config.plan;
  std::vector<std::string> notes;
  if (!rule.synchronous)
    notes.push_back("this plan trains asynchronously (" + rule.description +
                    "), not as synchronous SGD, and converges differently");
  else if (schedule::isAsynchronous(plan.schedule.name))
    notes.push_back(plan.schedule.name + " here trains as synchronous SGD (" + rule.description + ")");
  if (plan.microbatch_size < plan.samplesPerMinibatch())
    if (const std::vector<std::string> normed = models::batchNormLayers(model); !normed.empty())
      notes.push_back(formatted(
          "%zu layer(s) use batch norm ('%s'%s), whose statistics here are per micro-batch of %lld samples, not over "
          "the mini-batch of %lld as in one process: training differs from it",
          normed.size(), normed.front().c_str(), normed.size() > 1 ? ", ..." : "",
          static_cast<long long>(plan.microbatch_size), static_cast<long long>(plan.samplesPerMinibatch())));
  return notes;
}

}  // namespace

RunSummary summarizeRun(const TrainRequest& request, const models::Model& model, const LaunchedRun& run,
                        const Say& say) {
  const plan::Plan& plan = request.config.plan;
  const std::vector<runtime::RankResult>& results = run.ranks;
  RunSummary summary;
  report::TrainSummary& s = summary.record;
  s.measured_timeline = measuredTimeline(request, results);
  double train_seconds = 0;
  const runtime::RankResult* last = nullptr;  // a last stage's rank: the loss and the test figures
  for (const runtime::RankResult& r : results) {
    train_seconds = std::max(train_seconds, r.train_seconds);
    if (r.last_stage) last = &r;
    if (r.last_stage && s.history.empty())
      for (const runtime::EvalPoint& e : r.history) s.history.push_back(evaluationOf(e));
    s.ranks.push_back(rankEntry(r));
  }
  // What the simulator predicts for these measured stage times, next to what happened.
  const runtime::RankResult& any = results.front();
  const MeasuredRun measured{&plan,
                             stageSeconds(results, false),
                             stageSeconds(results, true),
                             request.concurrentRanks(),
                             request.blasThreadsPerRank(),
                             any.stage_output_bytes,
                             any.stage_param_bytes,
                             any.stage_preds,
                             any.sums_in_shared_memory ? LocalSums::kSharedMemory : LocalSums::kGloo,
                             frameworkSecondsPerAction(results),
                             run.hosts ? &*run.hosts : nullptr};
  // The run's stage times into the cached profile it was planned from (run_profile.h), as
  // the simulator prices them: where ranks take turns on the cores, their time on a core,
  // which is what a profile of shared cores measures (a core's speed), and the turns'
  // cost in switching and refilled caches with it (docs/profiling.md). Its memory beyond
  // the planned tensors too, wherever the ranks computed on the host.
  if (request.planning.record) {
    double slowest_probe = 0;  // the pace of the times it learns (runtime/core_probe.h)
    for (const runtime::RankResult& r : results) slowest_probe = std::max(slowest_probe, r.probe_seconds);
    RunLearning learning{measured.pricedSeconds(), slowest_probe, runMemory(s.ranks, request.planning.record->chosen)};
    // Where ranks took turns on the cores, their time between actions holds the turns,
    // which the cluster prices apart (SharedCores); a job across hosts is priced by its
    // hosts' figures.
    if (!run.hosts && request.ranks.nproc <= request.concurrentRanks()) {
      const std::vector<double> overheads = runtimeSecondsPerAction(measured);
      double sum = 0;
      for (double o : overheads) sum += o;
      if (!overheads.empty()) learning.action_overhead = sum / static_cast<double>(overheads.size());
    }
    sharpenCachedProfile(request.planning.record->profile, plan, learning, say);
  }
  sim::Evaluation prediction = predictRun(measured);
  const sim::Report& predicted = prediction.report;
  prediction.timeline.title = "predicted: " + s.measured_timeline.title;
  // Memory as the planner predicted it from the profile (its layers' activations): the
  // run's own stage times say nothing of it.
  const report::ChosenPrediction* chosen = request.planning.record ? &request.planning.record->chosen : nullptr;
  const bool planned_memory = chosen && chosen->rank_peak_memory_bytes.size() == s.ranks.size();
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    s.ranks[r].predicted_bubble_fraction = predicted.ranks[r].bubble_fraction;
    s.ranks[r].predicted_weight_versions = predicted.ranks[r].weight_versions;
    if (planned_memory) {
      s.ranks[r].predicted_peak_memory_bytes = chosen->rank_peak_memory_bytes[r];
      s.ranks[r].predicted_process_bytes = r < chosen->rank_process_bytes.size() ? chosen->rank_process_bytes[r] : 0;
    }
  }
  // Whether the plan trains otherwise than synchronous SGD: its update rule's verdict, not
  // its schedule's (PipeDream on one stage replicated over the whole mini-batch is
  // synchronous SGD).
  const planner::UpdateRule rule = planner::updateRuleOf(plan, model.layerGraph());
  summary.notes = trainingNotes(request, model, rule);
  s.model = request.config.model;
  s.schedule = plan.schedule.name;
  s.asynchronous = !rule.synchronous;
  s.world_size = request.ranks.nproc;
  s.final_loss = last ? last->final_loss : 0.0;
  s.samples = any.samples;
  s.throughput = train_seconds > 0 ? static_cast<double>(s.samples) / train_seconds : 0;
  s.wall_seconds = run.wall_seconds;
  s.predicted_throughput = predicted.throughput;
  s.plan_file = request.planning.plan_file;
  s.plan = plan;
  s.predicted_timeline = prediction.timeline;
  s.planner = request.planning.record;
  s.events = run.events;
  s.recipe = {request.config.optimizer, request.config.lr, request.config.lr_schedule, request.config.clip_grad_norm};
  if (last) {
    s.grad_norms = last->grad_norms;
    if (last->test_accuracy >= 0) s.test_accuracy = last->test_accuracy;
    if (last->test_loss >= 0) s.test_loss = last->test_loss;
  }
  return summary;
}

std::vector<std::string> writeRunOutputs(const TrainRequest& request, const RunSummary& summary) {
  const report::TrainSummary& s = summary.record;
  std::vector<std::string> written;
  if (!request.outputs.trace.empty()) {
    trace::writeChromeTrace(s.measured_timeline, request.outputs.trace);
    written.push_back("trace: " + request.outputs.trace);
  }
  if (!request.outputs.svg.empty()) {
    trace::writeSvgGantt(s.measured_timeline, request.outputs.svg);
    written.push_back("gantt: " + request.outputs.svg);
  }
  if (!request.outputs.summary_json.empty())
    json_io::writeFile(request.outputs.summary_json, report::trainSummaryToJson(s));
  if (!request.outputs.report_dir.empty()) {
    const std::string page = (std::filesystem::path(request.outputs.report_dir) / "report.html").string();
    report::writeHtml(
        report::pageForRun(s, report::readJsonLines(request.outputs.log_jsonl), request.outputs.summary_json), page);
    written.push_back("report: " + page);
  }
  return written;
}

}  // namespace pipetrain::job
