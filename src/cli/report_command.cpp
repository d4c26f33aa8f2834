// `pipetrain report`: the report page of a finished run, from the files `train` wrote
// (its summary and, when kept, its metrics log).
#include <cstdio>
#include <memory>

#include "commands.h"
#include "pipetrain/report/pages.h"
#include "pipetrain/report/run_page.h"
#include "pipetrain/util/error.h"

namespace pipetrain::cli {

Command addReportCommand(CLI::App& app) {
  struct Args {
    std::string summary, metrics, out;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("report", "Write the HTML report of a training run from its summary and metrics");
  cmd->add_option("--summary", a->summary, "the run's summary (train --summary-json, or summary.json of --report)")
      ->required();
  cmd->add_option("--metrics", a->metrics, "the run's metrics log (train --log-jsonl), for the loss curve");
  cmd->add_option("--out", a->out, "the HTML file to write")->required();
  return {cmd, [a] {
            const auto metrics = a->metrics.empty() ? std::vector<json_io::Json>{} : report::readJsonLines(a->metrics);
            const report::TrainSummary summary =
                report::trainSummaryFromJson(json_io::readFile(a->summary), a->summary);
            report::writeHtml(report::pageForRun(summary, metrics, a->summary), a->out);
            std::printf("report: %s\n", a->out.c_str());
            return 0;
          }};
}

}  // namespace pipetrain::cli
