// `pipetrain train`: real pipeline training. Here the flags of train's option table
// (job/train_options.h) fill a job::TrainRequest, job::resolveTrainRequest checks it
// whole, and job::train runs this process's part of the job (the
// launcher's without RANK in the environment, a rank's with it); what it says and
// returns is printed (train_console.h).
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <set>

#include "commands.h"
#include "options.h"
#include "train_console.h"
#include "pipetrain/job/launcher.h"
#include "pipetrain/job/rank_spec.h"
#include "pipetrain/job/train_checks.h"
#include "pipetrain/job/train_job.h"
#include "pipetrain/job/train_options.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/json_io.h"
#include "pipetrain/util/text.h"

namespace pipetrain::cli {
namespace {

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// The job, with what it says on the console: progress (rewritten in place by the
// launcher on a terminal), the planner's choice, and the run's summary where this
// process sums it up.
int runTrain(job::TrainRequest& a, const job::TrainAsked& asked) {
  std::optional<ProgressDisplay> display;  // from the first progress, when the plan is known
  const auto shown = [&]() -> ProgressDisplay& {
    if (!display) display.emplace(a.config.plan.samplesPerMinibatch(), std::getenv("RANK") == nullptr);
    return *display;
  };
  job::TrainWatch watch;
  watch.say = say;
  watch.planned = printPlanned;
  watch.progress = [&](const job::ProgressReport& p) { shown().show(p); };
  watch.line = [&](const std::string& line) {
    if (display) display->endLine();
    std::cout << line << std::endl;
  };
  watch.restart = [&](const std::string& why) {
    if (display) display->endLine();
    std::cerr << "pipetrain: " << why << std::endl;
  };
  watch.rank_progress = [&](const runtime::Progress& p) {
    shown().show({p.epoch, p.step, p.steps, p.loss, p.samples_per_second});
  };
  const job::TrainOutcome outcome = job::train(a, asked, watch);
  display.reset();  // its line ends before the summary
  if (outcome.summary) printRunSummary(a, *outcome.summary);
  if (outcome.rank) printRankResult(*outcome.rank);
  return 0;
}

}  // namespace

Command addTrainCommand(CLI::App& app) {
  auto a = std::make_shared<job::TrainRequest>();
  auto job_file = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("train", torchCommandDescription("train"));
  // A later --option overrides an earlier one, so scripts can append to a base command.
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  a->config.device = "auto";
  const auto table = std::make_shared<std::vector<options::Option>>(job::trainOptions(*a));
  addOptions(cmd, *table);
  auto* job = cmd->add_option(job::kJobOption, *job_file,
                              "FILE: a rank's whole job as JSON, as the launcher hands it to the ranks it starts "
                              "(every other option is in it)");
  auto* listing = cmd->add_flag("--options-json", "print these options as JSON, as the Python API reads them");
  return {cmd, [a, cmd, job, job_file, table, listing] {
            if (*listing) {
              std::cout << options::optionsToJson(*table).dump(1) << "\n";
              return 0;
            }
            if (*job) {
              for (const CLI::Option* o : cmd->get_options())
                if (o->count() > 0 && o != job) throw Error("--job holds the whole job; drop " + o->get_name());
              *a = job::rankJobFromJson(json_io::readFile(*job_file), *job_file);
              return runTrain(*a, job::askedOf({}));
            }
            const std::set<std::string> given = givenOptions(*cmd, *table);
            job::resolveTrainRequest(*a, given, say);
            return runTrain(*a, job::askedOf(given));
          }};
}

}  // namespace pipetrain::cli
