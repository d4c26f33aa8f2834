#include "pipetrain/trace/svg_gantt.h"
#include "pipetrain/util/text.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>

#include "pipetrain/util/error.h"
#include "svg_style.h"
#include "time_axis.h"

namespace pipetrain::trace {
namespace {

using schedule::ActionType;
using schedule::kNumActionTypes;
using svg::darken;
using svg::inkOn;
using svg::kActivationWire, svg::kFont, svg::kGradientWire, svg::kGrid, svg::kIdle, svg::kInk, svg::kMuted,
    svg::kPairOutline;
using svg::styleOf;
using svg::textWidth;
using svg::TypeStyle;
using text::xmlEscape;

constexpr double kPad = 16;
constexpr double kBusyColumn = 52;  // right of the plot: per-rank utilisation

std::string plural(std::size_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

std::string num(double v) { return axis::compact(v, 2); }


// The action as written in tooltips: "1B3 v0" (text form with the version set apart).
std::string actionText(schedule::Action a) {
  const int version = a.version;
  a.version = -1;
  std::string s = schedule::toString(a);
  if (version >= 0) s += " v" + std::to_string(version);
  return s;
}

// ---- Drawing ---------------------------------------------------------------------

class GanttWriter {
 public:
  GanttWriter(const Timeline& t, const GanttOptions& o) : t_(t) {
    plot_w_ = std::max(100, o.width);
    row_h_ = std::max(10, o.row_height);
    const double makespan = t.makespan();
    makespan_ = std::isfinite(makespan) && makespan > 0 ? makespan : 0;
    // A zero-length run still gets an axis; 1 ms is as good a span as any.
    span_ = std::max(makespan_, std::isfinite(o.span_seconds) ? o.span_seconds : 0.0);
    if (span_ <= 0) span_ = 1e-3;
    scale_ = plot_w_ / span_;
    show_wires_ = o.show_transfers && !t.transfers.empty();
    lane_h_ = show_wires_ ? std::clamp(std::floor(row_h_ / 5.0), 3.0, 6.0) : 0;
    pitch_ = row_h_ + (show_wires_ ? 2 + lane_h_ : 0) + 6;
    box_font_ = std::clamp(std::floor(row_h_ * 0.42), 8.0, 12.0);
    ticks_ = axis::niceTicks(span_, std::max(2, plot_w_ / 90));
    if (makespan_ == 0) ticks_.seconds = {0};  // no scale to show, only the origin
    tip_decimals_ = std::min(6, ticks_.decimals + 1);
    collectStages();
    layOut();
  }

  std::string render() {
    out_ += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    out_ += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width_) + "\" height=\"" +
            num(height_) + "\" viewBox=\"0 0 " + num(width_) + " " + num(height_) + "\" font-family=\"" +
            kFont + "\">\n";
    out_ += "<style>text{fill:" + std::string(kInk) +
            "}.mb{text-anchor:middle;pointer-events:none}.muted{fill:" + kMuted + "}</style>\n";
    out_ += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
    drawTitle();
    if (t_.numRanks() == 0) {
      drawEmpty();
    } else {
      drawRowsBackground();
      drawGrid();
      for (int r = 0; r < t_.numRanks(); ++r) drawRank(r);
      if (show_wires_) drawTransfers();
      drawAxis();
      drawLegend();
    }
    drawFooter();
    out_ += "</svg>\n";
    return std::move(out_);
  }

 private:
  double rowTop(int r) const { return rows_top_ + r * pitch_; }
  // Clamped to the plot, so a bogus (negative or infinite) time cannot escape it.
  double xOf(double seconds) const { return plot_x_ + std::clamp(seconds, 0.0, span_) * scale_; }
  std::string timeText(double seconds) const {
    return text::fixed(seconds * ticks_.unit.per_second, tip_decimals_);
  }

  void collectStages() {
    stages_.resize(t_.ranks.size());
    for (std::size_t r = 0; r < t_.ranks.size(); ++r)
      for (const TimedAction& a : t_.ranks[r])
        if (a.action.stage >= 0) stages_[r].insert(a.action.stage);
  }

  std::string stagesText(int r) const {
    const auto& s = stages_[static_cast<std::size_t>(r)];
    if (s.empty()) return "";
    std::string text = s.size() == 1 ? "stage " : "stages ";
    bool first = true;
    for (int stage : s) {
      text += (first ? "" : ",") + std::to_string(stage);
      first = false;
    }
    return text;
  }

  bool twoLineLabels() const { return row_h_ >= 24; }

  void layOut() {
    double label_w = 0;
    for (int r = 0; r < t_.numRanks(); ++r) {
      label_w = std::max(label_w, textWidth("rank " + std::to_string(r), 12));
      if (twoLineLabels()) label_w = std::max(label_w, textWidth(stagesText(r), 10));
    }
    label_w = std::max(label_w, textWidth("time (" + std::string(ticks_.unit.symbol) + ")", 11) +
                                    textWidth(text::fixed(0, ticks_.decimals), 11) / 2 - 2);
    plot_x_ = kPad + label_w + 14;
    width_ = plot_x_ + plot_w_ + kBusyColumn + kPad;
    width_ = std::max(width_, 2 * kPad + textWidth(titleText(), 16) + 8);
    rows_top_ = 56;
    const int rows = std::max(1, t_.numRanks());
    rows_bottom_ = rows_top_ + rows * pitch_ - 6;
    axis_y_ = rows_bottom_ + 6;
    legend_y_ = axis_y_ + 40;
    legend_bottom_ = t_.numRanks() == 0 ? rows_bottom_ : legend_y_ + layOutLegend();
    footer_y_ = legend_bottom_ + 22;
    height_ = footer_y_ + kPad;
  }

  std::string titleText() const {
    std::string s = t_.title.empty() ? "pipeline timeline" : t_.title;
    if (!t_.source.empty()) s += " \xC2\xB7 " + t_.source;
    return s;
  }

  void drawTitle() {
    out_ += "<text x=\"" + num(kPad) + "\" y=\"32\" font-size=\"16\" font-weight=\"bold\">" +
            xmlEscape(t_.title.empty() ? "pipeline timeline" : t_.title);
    if (!t_.source.empty())
      // A leading space would be collapsed by XML whitespace rules; dx is not.
      out_ += "<tspan class=\"muted\" font-weight=\"normal\" dx=\"8\">\xC2\xB7 " + xmlEscape(t_.source) +
              "</tspan>";
    out_ += "</text>\n";
  }

  void drawEmpty() {
    out_ += "<rect x=\"" + num(plot_x_) + "\" y=\"" + num(rows_top_) + "\" width=\"" + num(plot_w_) +
            "\" height=\"" + num(row_h_) + "\" fill=\"" + kIdle + "\"/>\n";
    out_ += "<text class=\"muted\" x=\"" + num(plot_x_ + plot_w_ / 2.0) + "\" y=\"" +
            num(rows_top_ + row_h_ / 2.0 + 4) + "\" font-size=\"12\" text-anchor=\"middle\">" +
            "empty timeline: no rank ran anything</text>\n";
  }

  // The idle stripe of each row is what makes bubbles visible: boxes cover it
  // where the rank works, and whatever light grey is left is waiting.
  void drawRowsBackground() {
    out_ += "<g class=\"rows\">\n";
    for (int r = 0; r < t_.numRanks(); ++r) {
      const double y = rowTop(r);
      out_ += "<rect class=\"row\" x=\"" + num(plot_x_) + "\" y=\"" + num(y) + "\" width=\"" + num(plot_w_) +
              "\" height=\"" + num(row_h_) + "\" fill=\"" + kIdle + "\"/>\n";
      const double mid = y + row_h_ / 2.0;
      const std::string stages = stagesText(r);
      const bool two = twoLineLabels() && !stages.empty();
      out_ += "<text x=\"" + num(plot_x_ - 10) + "\" y=\"" + num(two ? mid - 1 : mid + 4) +
              "\" font-size=\"12\" font-weight=\"bold\" text-anchor=\"end\">rank " + std::to_string(r) +
              "</text>\n";
      if (two)
        out_ += "<text class=\"muted\" x=\"" + num(plot_x_ - 10) + "\" y=\"" + num(mid + 10) +
                "\" font-size=\"10\" text-anchor=\"end\">" + stages + "</text>\n";
      if (makespan_ > 0) {
        const double busy = 100 * t_.busySeconds(r) / makespan_;
        out_ += "<text class=\"muted\" x=\"" + num(plot_x_ + plot_w_ + 10) + "\" y=\"" + num(mid + 4) +
                "\" font-size=\"11\">" + text::fixed(busy, 0) + "%</text>\n";
      }
    }
    if (makespan_ > 0)
      out_ += "<text class=\"muted\" x=\"" + num(plot_x_ + plot_w_ + 10) + "\" y=\"" + num(rows_top_ - 8) +
              "\" font-size=\"10\">busy</text>\n";
    out_ += "</g>\n";
  }

  void drawGrid() {
    out_ += "<g class=\"grid\" stroke=\"" + std::string(kGrid) + "\" stroke-width=\"1\">\n";
    for (double s : ticks_.seconds) {
      const double x = std::round(xOf(s)) + 0.5;  // crisp one-pixel lines
      out_ += "<line x1=\"" + num(x) + "\" y1=\"" + num(rows_top_) + "\" x2=\"" + num(x) + "\" y2=\"" +
              num(rows_bottom_) + "\"/>\n";
    }
    out_ += "</g>\n";
  }

  std::string boxLabel(const schedule::Action& a, int r, double box_w) const {
    std::vector<std::string> candidates;  // longest first
    if (a.type == ActionType::STEP) {
      candidates = {"step"};
    } else if (a.type == ActionType::ALLREDUCE) {
      candidates = {"all-reduce", "AR"};
    } else {
      const std::string mb = std::to_string(a.microbatch);
      if (stages_[static_cast<std::size_t>(r)].size() > 1)
        candidates.push_back(std::to_string(a.stage) + ":" + mb);
      candidates.push_back(mb);
    }
    for (const std::string& c : candidates)
      if (textWidth(c, box_font_) + 4 <= box_w) return c;
    return "";
  }

  void drawRank(int r) {
    const auto& stages = stages_[static_cast<std::size_t>(r)];
    const double pad = std::max(2.0, std::floor(row_h_ / 8.0));
    const double y = rowTop(r) + pad;
    const double h = row_h_ - 2 * pad;
    out_ += "<g class=\"rank\" data-rank=\"" + std::to_string(r) + "\">\n";
    const auto& actions = t_.ranks[static_cast<std::size_t>(r)];
    std::vector<std::pair<double, double>> pairs;  // overlapped F&B: from F's start to B's end
    for (std::size_t i = 0; i < actions.size(); ++i) {
      const TimedAction& ta = actions[i];
      const schedule::Action& a = ta.action;
      if (a.overlap_next && i + 1 < actions.size()) pairs.push_back({ta.start, actions[i + 1].end});
      const TypeStyle& style = styleOf(a.type);
      // Interleaved ranks hold several stages: a later stage is a darker shade of the
      // same colour, so chunks stay distinguishable without a second legend.
      double shade = 0;
      if (stages.size() > 1) {
        const auto k = std::distance(stages.begin(), stages.find(a.stage));
        shade = 0.3 * static_cast<double>(k) / static_cast<double>(stages.size() - 1);
      }
      const double x = xOf(ta.start);
      const double w = std::max(0.75, xOf(ta.end) - x);  // never invisible
      out_ += "<g class=\"box " + std::string(schedule::name(a.type)) + "\"><title>rank " +
              std::to_string(r) + ": " + xmlEscape(actionText(a)) + ", " + timeText(ta.start) +
              "\xE2\x80\x93" + timeText(ta.end) + " " + ticks_.unit.symbol + "</title>";
      const std::string fill = darken(style.fill, shade);
      out_ += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" + num(h) +
              "\" fill=\"" + fill + "\"";
      // A hairline keeps back-to-back boxes of one colour apart, but would swallow
      // the fill of a box only a few pixels wide.
      if (w >= 4) out_ += " rx=\"2\" stroke=\"#ffffff\" stroke-width=\"0.75\"";
      out_ += "/>";
      const std::string label = boxLabel(a, r, w);
      if (!label.empty())
        out_ += "<text class=\"mb\" x=\"" + num(x + w / 2) + "\" y=\"" + num(y + h / 2 + box_font_ * 0.36) +
                "\" font-size=\"" + num(box_font_) + "\" style=\"fill:" + inkOn(fill) + "\">" +
                xmlEscape(label) + "</text>";
      out_ += "</g>\n";
    }
    // One outline around each overlapped pair, so it reads as the single action it is.
    for (const auto& [start, end] : pairs)
      out_ += "<rect class=\"pair\" x=\"" + num(xOf(start) - 0.5) + "\" y=\"" + num(y - 1.5) + "\" width=\"" +
              num(xOf(end) - xOf(start) + 1) + "\" height=\"" + num(h + 3) + "\" rx=\"3\" fill=\"none\" stroke=\"" +
              kPairOutline + "\" stroke-width=\"1.5\"/>\n";
    out_ += "</g>\n";
  }

  // Thin bars under the sender's row: when its outgoing messages occupy the wire.
  void drawTransfers() {
    out_ += "<g class=\"transfers\">\n";
    for (const Transfer& tr : t_.transfers) {
      if (tr.from_rank < 0 || tr.from_rank >= t_.numRanks()) continue;
      const double y = rowTop(tr.from_rank) + row_h_ + 2;
      const double x = xOf(tr.start);
      const double w = std::max(0.75, xOf(tr.end) - x);
      const bool gradient = tr.send.type == ActionType::SEND_B;
      const schedule::Action& s = tr.send;
      out_ += "<rect class=\"transfer\" x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) +
              "\" height=\"" + num(lane_h_) + "\" fill=\"" + (gradient ? kGradientWire : kActivationWire) +
              "\"><title>rank " + std::to_string(tr.from_rank) + " \xE2\x86\x92 rank " +
              std::to_string(tr.to_rank) + ": " + schedule::name(s.type) + " " + std::to_string(s.stage) +
              "&gt;" + std::to_string(s.peer_stage) + " mb" + std::to_string(s.microbatch) + ", " +
              timeText(tr.start) + "\xE2\x80\x93" + timeText(tr.end) + " " + ticks_.unit.symbol;
      if (tr.bytes > 0) out_ += ", " + text::humanBytes(tr.bytes);
      out_ += "</title></rect>\n";
    }
    out_ += "</g>\n";
  }

  void drawAxis() {
    out_ += "<g class=\"axis\">\n";
    out_ += "<line x1=\"" + num(plot_x_) + "\" y1=\"" + num(axis_y_ + 0.5) + "\" x2=\"" +
            num(plot_x_ + plot_w_) + "\" y2=\"" + num(axis_y_ + 0.5) + "\" stroke=\"" + kMuted + "\"/>\n";
    for (double s : ticks_.seconds) {
      const double x = std::round(xOf(s)) + 0.5;
      out_ += "<line x1=\"" + num(x) + "\" y1=\"" + num(axis_y_) + "\" x2=\"" + num(x) + "\" y2=\"" +
              num(axis_y_ + 5) + "\" stroke=\"" + kMuted + "\"/>";
      out_ += "<text x=\"" + num(x) + "\" y=\"" + num(axis_y_ + 18) +
              "\" font-size=\"11\" text-anchor=\"middle\">" +
              text::fixed(s * ticks_.unit.per_second, ticks_.decimals) + "</text>\n";
    }
    // Right-aligned just clear of the first tick label, which is centred on the axis start.
    const double first_label = textWidth(text::fixed(0, ticks_.decimals), 11);
    out_ += "<text class=\"muted\" x=\"" + num(plot_x_ - 8 - first_label / 2) + "\" y=\"" +
            num(axis_y_ + 18) + "\" font-size=\"11\" text-anchor=\"end\">time (" + ticks_.unit.symbol +
            ")</text>\n";
    out_ += "</g>\n";
  }

  // ---- Legend: only what occurs, in the ActionType order -------------------------

  struct LegendItem {
    std::string key;  // data-type
    std::string fill;
    std::string code;  // the action type's name, in bold before the text
    std::string text;
    bool thin = false;  // drawn like a transfer bar
    double x = 0, y = 0;
  };

  double layOutLegend() {
    std::array<bool, kNumActionTypes> seen{};
    for (const auto& rank : t_.ranks)
      for (const TimedAction& a : rank) seen[static_cast<std::size_t>(a.action.type)] = true;
    for (int i = 0; i < kNumActionTypes; ++i) {
      if (!seen[static_cast<std::size_t>(i)]) continue;
      const auto type = static_cast<ActionType>(i);
      legend_.push_back(
          {schedule::name(type), styleOf(type).fill, schedule::name(type), styleOf(type).legend});
    }
    if (show_wires_) {
      bool activations = false, gradients = false;
      for (const Transfer& tr : t_.transfers)
        (tr.send.type == ActionType::SEND_B ? gradients : activations) = true;
      if (activations)
        legend_.push_back({"wire-activation", kActivationWire, "", "activation transfer", true});
      if (gradients) legend_.push_back({"wire-gradient", kGradientWire, "", "gradient transfer", true});
    }
    legend_.push_back({"idle", kIdle, "", "idle (bubble)"});
    bool overlapped = false;
    for (const auto& rank : t_.ranks)
      for (const TimedAction& a : rank) overlapped = overlapped || a.action.overlap_next;
    if (overlapped) legend_.push_back({"pair", kPairOutline, "", "outlined = forward and backward overlapped"});
    bool interleaved = false;
    for (const auto& s : stages_) interleaved = interleaved || s.size() > 1;
    if (interleaved)
      legend_.push_back(
          {"stage-shade", darken(styleOf(ActionType::F).fill, 0.3), "", "darker = later stage on the rank"});

    // Flow left to right, wrapping at the right edge of the picture.
    const double right = width_ - kPad;
    double x = plot_x_, y = 0;
    for (LegendItem& item : legend_) {
      const std::string words = item.code.empty() ? item.text : item.code + " " + item.text;
      const double w = 20 + textWidth(words, 11) + 18;
      if (x > plot_x_ && x + w > right) {
        x = plot_x_;
        y += 18;
      }
      item.x = x;
      item.y = y;
      x += w;
    }
    return y + 12;
  }

  void drawLegend() {
    out_ += "<g class=\"legend\">\n";
    for (const LegendItem& item : legend_) {
      const double y = legend_y_ + item.y;
      out_ += "<g class=\"legend-item\" data-type=\"" + item.key + "\">";
      if (item.thin)
        out_ += "<rect x=\"" + num(item.x) + "\" y=\"" + num(y + 3) + "\" width=\"14\" height=\"" +
                num(std::max(3.0, lane_h_)) + "\" fill=\"" + item.fill + "\"/>";
      else if (item.key == "pair")
        out_ += "<rect x=\"" + num(item.x) + "\" y=\"" + num(y) + "\" width=\"14\" height=\"10\" rx=\"2\" fill=\"none\" stroke=\"" +
                item.fill + "\" stroke-width=\"1.5\"/>";
      else
        out_ += "<rect x=\"" + num(item.x) + "\" y=\"" + num(y) +
                "\" width=\"14\" height=\"10\" rx=\"2\" fill=\"" + item.fill + "\"" +
                (item.key == "idle" ? " stroke=\"" + std::string(kGrid) + "\"" : "") + "/>";
      out_ += "<text x=\"" + num(item.x + 20) + "\" y=\"" + num(y + 9) + "\" font-size=\"11\">";
      if (!item.code.empty()) out_ += "<tspan font-weight=\"bold\">" + xmlEscape(item.code) + "</tspan> ";
      out_ += xmlEscape(item.text) + "</text></g>\n";
    }
    out_ += "</g>\n";
  }

  void drawFooter() {
    std::string text = "makespan " + axis::duration(makespan_);
    if (makespan_ > 0 && t_.numRanks() > 0) {
      double busy = 0;
      for (int r = 0; r < t_.numRanks(); ++r) busy += t_.busySeconds(r);
      text +=
          "  \xC2\xB7  mean utilisation " + text::fixed(100 * busy / (makespan_ * t_.numRanks()), 1) + "%";
    }
    std::size_t actions = 0;
    for (const auto& rank : t_.ranks) actions += rank.size();
    text += "  \xC2\xB7  " + plural(t_.ranks.size(), "rank") + ", " + plural(actions, "action") + ", " +
            (t_.transfers.empty() && t_.source == "measured" ? std::string("messages not traced")
                                                              : plural(t_.transfers.size(), "transfer"));
    out_ += "<text class=\"muted footer\" x=\"" + num(kPad) + "\" y=\"" + num(footer_y_) +
            "\" font-size=\"11\">" + text + "</text>\n";
    out_ += "<text class=\"muted\" x=\"" + num(width_ - kPad) + "\" y=\"" + num(footer_y_) +
            "\" font-size=\"10\" text-anchor=\"end\" fill-opacity=\"0.7\">pipetrain</text>\n";
  }

  const Timeline& t_;
  int plot_w_ = 0;
  int row_h_ = 0;
  double makespan_ = 0, span_ = 0, scale_ = 0;
  bool show_wires_ = false;
  double lane_h_ = 0, pitch_ = 0, box_font_ = 0;
  axis::Ticks ticks_;
  int tip_decimals_ = 1;
  std::vector<std::set<int>> stages_;  // per rank: the stages it runs
  std::vector<LegendItem> legend_;
  double plot_x_ = 0, width_ = 0, height_ = 0;
  double rows_top_ = 0, rows_bottom_ = 0, axis_y_ = 0, legend_y_ = 0, legend_bottom_ = 0, footer_y_ = 0;
  std::string out_;
};

}  // namespace

std::string toSvgGantt(const Timeline& timeline, const GanttOptions& options) {
  return GanttWriter(timeline, options).render();
}

void writeSvgGantt(const Timeline& timeline, const std::string& path, const GanttOptions& options) {
  const std::string svg = toSvgGantt(timeline, options);
  // Same discipline as json_io::writeFile: never leave a half-written picture.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) throw Error(path + ": cannot write file");
    out << svg;
    if (!out.flush()) throw Error(path + ": write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error(path + ": cannot replace file");
  }
}

}  // namespace pipetrain::trace
