// `pipetrain schedule`: print a generated schedule, or validate a user's CSV schedule.
#include <fstream>
#include <iostream>

#include "commands.h"
#include "options.h"
#include "pipetrain/schedule/csv_schedule.h"
#include "pipetrain/schedule/program_check.h"
#include "pipetrain/schedule/program_memory.h"
#include "pipetrain/schedule/schedule_request.h"
#include "pipetrain/schedule/schedules.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/text.h"

namespace pipetrain::cli {
namespace {

struct ScheduleArgs {
  schedule::ScheduleRequest request;
  std::string csv_in, csv_out;
  bool with_comm = false;
  bool memory = false;
};


// Communication is noise when reading a schedule; --with-comm shows it.
schedule::Program withoutComm(schedule::Program p) {
  for (auto& actions : p.ranks) {
    std::vector<schedule::Action> kept;
    for (const auto& a : actions)
      if (!schedule::isComm(a.type)) kept.push_back(a);
    actions = std::move(kept);
  }
  return p;
}

// What reading a user's CSV schedule found: that it is valid, how it was read, and how
// it compares with pipetrain's own generators.
void describeCsv(const schedule::CsvSchedule& csv, const std::string& file) {
  const schedule::Program& p = csv.program;
  std::cout << file << ": a valid schedule of " << p.numRanks() << " ranks, " << p.num_stages << " stages, "
            << p.microbatches << " micro-batches\n";
  if (csv.notation == schedule::BackwardNotation::kOlder)
    std::cout << "  read in PyTorch's older notation: B the input gradients, W the weight gradients, BW the full "
                 "backward (printed below as I, W and B)\n";
  if (csv.gave_communication)
    std::cout << "  its SEND/RECV actions are the messages lowering needs; " << csv.late_sends
              << " send(s) are posted later than right after the action that makes their data (kept where the file "
                 "puts them; receives wait right before the action that needs them)\n";
  if (const auto match = schedule::closestGenerator(p)) {
    if (match->first_difference.empty())
      std::cout << "  the same compute order as pipetrain's " << match->name << "\n";
    else
      std::cout << "  closest to pipetrain's " << match->name << ": " << match->identical_ranks << " of " << match->ranks
                << " ranks in the same order; first difference at " << match->first_difference << "\n";
  }
}

int run(const ScheduleArgs& args) {
  schedule::Program program;
  if (!args.csv_in.empty()) {
    const schedule::CsvSchedule csv = schedule::readCsvSchedule(text::readFile(args.csv_in), args.csv_in);
    schedule::validateCsvSchedule(csv);
    describeCsv(csv, args.csv_in);
    program = csv.program;
  } else {
    program = schedule::generatedProgram(args.request);
  }
  std::cout << schedule::toText(args.with_comm ? program : withoutComm(program));
  if (args.memory) {
    const auto footprint = schedule::accountMemory(program);
    for (int r = 0; r < program.numRanks(); ++r)
      std::cout << "rank " << r << ": peak activations " << footprint[r].peak_activations
                << " micro-batches, weight versions " << footprint[r].weight_versions << "\n";
  }
  if (!args.csv_out.empty()) {
    std::ofstream out(args.csv_out);
    if (!(out << schedule::toCsv(program))) throw Error(args.csv_out + ": cannot write file");
  }
  return 0;
}

}  // namespace

Command addScheduleCommand(CLI::App& app) {
  auto args = std::make_shared<ScheduleArgs>();
  CLI::App* cmd = app.add_subcommand("schedule", "Print a schedule's per-rank actions, or validate a CSV schedule");
  addOptions(cmd, schedule::scheduleOptions(args->request));
  cmd->add_option("--csv", args->csv_in, "read and validate a per-rank CSV schedule instead (PyTorch's: compute actions in either of its notations, with or without SEND/RECV)");
  cmd->add_option("--write-csv", args->csv_out, "write the compute actions as a per-rank CSV");
  cmd->add_flag("--with-comm", args->with_comm, "also print the SEND/RECV actions lowering adds");
  cmd->add_flag("--memory", args->memory, "print each rank's peak activations and weight versions");
  return {cmd, [args] { return run(*args); }};
}

}  // namespace pipetrain::cli
