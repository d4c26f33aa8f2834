#include "plan_table.h"

#include <algorithm>
#include <cstdio>

#include "pipetrain/report/exploration_table.h"

namespace pipetrain::cli {

void printExploration(const planner::Exploration& e, int top) {
  const report::Table t = report::explorationTable(e, top);
  std::vector<std::size_t> width(t.header.size());
  for (std::size_t c = 0; c < t.header.size(); ++c) {
    width[c] = t.header[c].size();
    for (const auto& row : t.rows) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      // Text columns (schedule, by, shape) left-aligned, numbers right-aligned.
      const bool left = t.header[c] == "schedule" || t.header[c] == "by" || t.header[c] == "stages x repl";
      const std::string pad(width[c] - cells[c].size(), ' ');
      out += (c ? "  " : "") + (left ? cells[c] + pad : pad + cells[c]);
    }
    std::printf("%s\n", out.c_str());
  };
  line(t.header);
  for (const auto& row : t.rows) line(row);
  for (const auto& note : report::explorationNotes(e)) std::printf("%s\n", note.c_str());
}

}  // namespace pipetrain::cli
