// The report page: sections in the order a reader asks their questions. What ran and
// how fast; the plan and why; where each rank's time went, predicted above measured;
// per-rank idle time and memory; and how training progressed.
#include <algorithm>

#include "charts.h"
#include "pipetrain/report/report.h"
#include "pipetrain/trace/svg_gantt.h"
#include "pipetrain/util/text.h"

namespace pipetrain::report {
namespace {

using text::xmlEscape;

constexpr const char* kStyle = R"(
body { font-family: DejaVu Sans, Helvetica, Arial, sans-serif; color: #1f2933; margin: 24px auto; max-width: 1280px; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; }
h3 { font-size: 14px; margin: 18px 0 4px; }
h2 { font-size: 17px; border-bottom: 1px solid #d5dae1; padding-bottom: 4px; margin-top: 28px; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; }
dl.facts dt { color: #6b7280; } dl.facts dd { margin: 0; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0 16px; }
caption { text-align: left; font-weight: bold; padding-bottom: 4px; }
th, td { border: 1px solid #d5dae1; padding: 3px 8px; text-align: left; }
th { background: #eef1f5; cursor: pointer; }
tr.chosen td { background: #fff4d6; font-weight: bold; }
.note { background: #eef6ff; border-left: 3px solid #0072b2; padding: 6px 10px; margin: 6px 0; }
svg.chart text, svg.chart { font-size: 12px; }
svg.chart .grid { stroke: #d5dae1; stroke-width: 1; }
svg.chart .tick, svg.chart .value { fill: #6b7280; font-size: 11px; }
.gantt { overflow-x: auto; margin-bottom: 12px; }
.gantt svg { max-width: 100%; height: auto; }
)";

// Clicking a column header sorts the table by it (numbers by value, as they read).
constexpr const char* kScript = R"(
window.addEventListener('error', function (e) {
  document.documentElement.setAttribute('data-errors', String(e.message));
});
document.querySelectorAll('table').forEach(function (table) {
  table.querySelectorAll('th').forEach(function (th, column) {
    th.addEventListener('click', function () {
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      var up = th.getAttribute('data-up') !== 'true';
      var key = function (row) {
        var text = row.cells[column].textContent, n = parseFloat(text);
        return isNaN(n) ? text : n;
      };
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        return (x < y ? -1 : x > y ? 1 : 0) * (up ? 1 : -1);
      });
      rows.forEach(function (row) { body.appendChild(row); });
      th.setAttribute('data-up', String(up));
    });
  });
});
document.documentElement.setAttribute('data-rendered', 'yes');
)";

std::string tableHtml(const Table& t) {
  std::string out = "<table>";
  if (!t.caption.empty()) out += "<caption>" + xmlEscape(t.caption) + "</caption>";
  out += "<thead><tr>";
  for (const auto& h : t.header) out += "<th>" + xmlEscape(h) + "</th>";
  out += "</tr></thead><tbody>";
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    out += static_cast<int>(r) == t.highlighted_row ? "<tr class=\"chosen\">" : "<tr>";
    for (const auto& cell : t.rows[r]) out += "<td>" + xmlEscape(cell) + "</td>";
    out += "</tr>";
  }
  return out + "</tbody></table>\n";
}

std::string section(const std::string& id, const std::string& heading, const std::string& body) {
  return "<section id=\"" + id + "\"><h2>" + xmlEscape(heading) + "</h2>\n" + body + "</section>\n";
}

}  // namespace

std::string renderHtml(const Page& page) {
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>" +
                     xmlEscape(page.title) + "</title>\n<style>" + kStyle + "</style></head>\n<body>\n<h1>" +
                     xmlEscape(page.title) + "</h1>\n";
  std::string summary = "<dl class=\"facts\">";
  for (const auto& f : page.facts) summary += "<dt>" + xmlEscape(f.label) + "</dt><dd>" + xmlEscape(f.value) + "</dd>";
  summary += "</dl>\n";
  for (const auto& n : page.notes) summary += "<p class=\"note\">" + xmlEscape(n) + "</p>\n";
  html += section("summary", "Summary", summary);
  if (!page.tables.empty()) {
    std::string body;
    for (const auto& t : page.tables) body += tableHtml(t);
    html += section("plan", "Plan", body);
  }
  if (!page.timelines.empty()) {
    // One time axis for all, so that a gap between predicted and measured shows as one.
    trace::GanttOptions options;
    for (const auto& t : page.timelines) options.span_seconds = std::max(options.span_seconds, t.makespan());
    std::string body;
    for (const auto& t : page.timelines)
      body += "<div class=\"gantt\">" + trace::toSvgGantt(t, options) + "</div>\n";
    html += section("timelines", "Timelines", body);
  }
  if (!page.bars.empty()) {
    std::string body;
    for (const auto& b : page.bars) body += "<h3>" + xmlEscape(b.title) + "</h3>\n" + barChartSvg(b) + "\n";
    html += section("ranks", "Per rank", body);
  }
  if (!page.lines.empty()) {
    std::string body;
    for (const auto& l : page.lines) body += "<h3>" + xmlEscape(l.title) + "</h3>\n" + lineChartSvg(l) + "\n";
    html += section("training", "Training", body);
  }
  return html + "<script>" + kScript + "</script>\n</body></html>\n";
}

void writeHtml(const Page& page, const std::string& path) { text::writeFileAtomically(path, renderHtml(page)); }

}  // namespace pipetrain::report
