// tta_report: the time-to-accuracy table (Markdown, on stdout and --out-md) and plot
// (--out-svg) from `pipetrain train --summary-json` files named <config>_seed<N>.json.
// A file {"failed": true, ...} stands for a run that failed. Run by
// bench/time_to_accuracy.sh; missing fields read "n/a".
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "pipetrain/plan/plan.h"
#include "pipetrain/util/error.h"

using Json = nlohmann::json;

namespace {

struct Run { int seed = 0; bool failed = false; Json j; };
struct Config { std::string name; std::vector<Run> runs; };
struct Point { double epoch, train_s, wall_s, value; };

[[noreturn]] void die(const std::string& msg) { std::cerr << "tta_report: " << msg << "\n", std::exit(1); }
double num(const Json& j, const std::string& key) {  // NaN when missing
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}
std::string str(const Json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "n/a";
}
std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
std::string xml(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  return o;
}

// Median, and "(min–max)" when the values differ; NaNs are left out.
std::string agg(std::vector<double> v, const char* f) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return "n/a";
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  std::string s = fmt(f, n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
  return v.front() < v.back() ? s + " (" + fmt(f, v.front()) + "–" + fmt(f, v.back()) + ")" : s;
}

std::vector<Point> history(const Json& j, const std::string& metric) {
  std::vector<Point> out;
  if (!j.contains("history") || !j["history"].is_array()) return out;
  for (size_t i = 0; i < j["history"].size(); ++i) {
    const Json& h = j["history"][i];
    double v = num(h, metric), e = num(h, "epoch");
    if (!std::isnan(v)) out.push_back({std::isnan(e) ? double(i + 1) : e, num(h, "train_seconds"), num(h, "wall_seconds"), v});
  }
  return out;
}

Run load(const std::string& file) {
  std::ifstream in(file);
  if (!in) die(file + ": cannot read");
  Run r;
  try { in >> r.j; } catch (const Json::exception& e) { die(file + ": malformed JSON: " + e.what()); }
  if (!r.j.is_object()) die(file + ": malformed summary: not a JSON object");
  if (r.j.contains("format") && r.j["format"] != "pipetrain.train-summary")
    die(file + ": not a pipetrain.train-summary (format " + r.j["format"].dump() + ")");
  r.failed = r.j.value("failed", false) == true;
  return r;
}

// x = wall seconds, y = metric; one colour per configuration, dashed when asynchronous.
std::string plot(const std::vector<Config>& configs, const std::string& metric, const std::string& title,
                 double target) {
  static const char* colours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                  "#e377c2", "#bcbd22", "#17becf", "#222222", "#393b79", "#e6ab02"};
  const double W = 900, H = 560, L = 75, R = 690, T = 50, B = 500;  // plot area [L,R]×[T,B]
  double xmax = 0, ylo = target, yhi = target;
  for (const Config& c : configs)
    for (const Run& r : c.runs)
      for (const Point& p : history(r.j, metric)) {
        if (!std::isnan(p.wall_s)) xmax = std::max(xmax, p.wall_s);
        ylo = std::min(ylo, p.value), yhi = std::max(yhi, p.value);
      }
  auto nice = [](double lo, double hi, double& step) {  // about 6 ticks on 1-2-5 steps
    if (!(hi > lo)) hi = lo + 1;
    double raw = (hi - lo) / 6, mag = std::pow(10, std::floor(std::log10(raw))), f = raw / mag;
    step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
    return std::make_pair(std::floor(lo / step) * step, std::ceil(hi / step - 1e-9) * step);
  };
  double xs, ys;
  auto [x0, x1] = nice(0, xmax, xs);
  auto [y0, y1] = nice(ylo, yhi, ys);
  auto X = [&](double v) { return L + (v - x0) / (x1 - x0) * (R - L); };
  auto Y = [&](double v) { return B - (v - y0) / (y1 - y0) * (B - T); };
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W
    << " " << H << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << W / 2 << "\" y=\"28\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">" << xml(title)
    << "</text>\n";
  for (int k = 0; x0 + k * xs <= x1 + xs * 1e-6; ++k) {
    double v = x0 + k * xs;
    s << "<line x1=\"" << X(v) << "\" y1=\"" << T << "\" x2=\"" << X(v) << "\" y2=\"" << B << "\" stroke=\"#e5e5e5\"/>"
      << "<text x=\"" << X(v) << "\" y=\"" << B + 17 << "\" text-anchor=\"middle\">" << fmt("%g", v) << "</text>\n";
  }
  for (int k = 0; y0 + k * ys <= y1 + ys * 1e-6; ++k) {
    double v = y0 + k * ys;
    s << "<line x1=\"" << L << "\" y1=\"" << Y(v) << "\" x2=\"" << R << "\" y2=\"" << Y(v) << "\" stroke=\"#e5e5e5\"/>"
      << "<text x=\"" << L - 6 << "\" y=\"" << Y(v) + 4 << "\" text-anchor=\"end\">" << fmt("%g", v) << "</text>\n";
  }
  s << "<rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << R - L << "\" height=\"" << B - T
    << "\" fill=\"none\" stroke=\"#333\"/>\n<text x=\"" << (L + R) / 2 << "\" y=\"" << B + 40
    << "\" text-anchor=\"middle\">wall-clock seconds since training start (evaluation included)</text>\n<text x=\"20\" y=\""
    << (T + B) / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 20 " << (T + B) / 2 << ")\">"
    << (metric == "test_accuracy" ? "test accuracy" : "validation loss") << "</text>\n<line x1=\"" << L << "\" y1=\""
    << Y(target) << "\" x2=\"" << R << "\" y2=\"" << Y(target)
    << "\" stroke=\"#666\" stroke-width=\"1.5\" stroke-dasharray=\"2 4\"/>\n";
  double ly = T + 8;
  s << "<line x1=\"705\" y1=\"" << ly << "\" x2=\"733\" y2=\"" << ly
    << "\" stroke=\"#666\" stroke-width=\"1.5\" stroke-dasharray=\"2 4\"/><text x=\"740\" y=\"" << ly + 4
    << "\">target " << fmt("%g", target) << "</text>\n";
  for (size_t i = 0; i < configs.size(); ++i) {
    const char* colour = colours[i % (sizeof colours / sizeof *colours)];
    bool async = false, first = true;
    for (const Run& r : configs[i].runs) {
      if (r.failed) continue;
      async = async || r.j.value("asynchronous", false) == true;
      std::string dash = async ? " stroke-dasharray=\"7 4\"" : "";
      s << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"" << (first ? 2 : 1.2) << "\""
        << (first ? "" : " stroke-opacity=\"0.5\"") << dash << " points=\"";
      for (const Point& p : history(r.j, metric))
        if (!std::isnan(p.wall_s)) s << X(p.wall_s) << "," << Y(p.value) << " ";
      s << "\"/>\n";
      first = false;
    }
    ly += 20;
    s << "<line x1=\"705\" y1=\"" << ly << "\" x2=\"733\" y2=\"" << ly << "\" stroke=\"" << colour
      << "\" stroke-width=\"2\"" << (async ? " stroke-dasharray=\"7 4\"" : "") << (first ? " stroke-opacity=\"0.25\"" : "")
      << "/><text x=\"740\" y=\"" << ly + 4
      << "\">" << xml(configs[i].name) << (first ? " (failed)" : "") << "</text>\n";
  }
  s << "<text x=\"705\" y=\"" << ly + 30 << "\" fill=\"#555\">dashed: asynchronous</text>\n</svg>\n";
  return s.str();
}

}  // namespace

// "pipedream 2x1, 32 x 8": the schedule, stages x replicas and micro-batching a run trained.
std::string planText(const Json& summary) {
  const std::string schedule = str(summary, "schedule");
  if (!summary.contains("plan")) return schedule;
  try {
    const pipetrain::plan::Plan plan = pipetrain::plan::Plan::fromJson(summary["plan"], "summary");
    return schedule + " " + pipetrain::plan::stageShape(plan) + ", " + std::to_string(plan.microbatch_size) + " x " +
           std::to_string(plan.microbatches);
  } catch (const pipetrain::Error&) {
    return schedule;  // a summary from before plans were kept in it
  }
}

// Seconds a run spent before training: profiling, planning and calibrating.
double beforeTraining(const Json& planner) {
  double seconds = 0;
  if (planner.contains("profile")) seconds += std::max(0.0, num(planner["profile"], "seconds"));
  seconds += std::max(0.0, num(planner, "planning_seconds"));
  if (planner.contains("calibration")) seconds += std::max(0.0, num(planner["calibration"], "seconds"));
  return seconds;
}

int main(int argc, char** argv) {
  std::string task, out_md, out_svg;
  double target = NAN;
  std::vector<Config> configs;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&] { return ++i < argc ? std::string(argv[i]) : (die(a + " needs a value"), ""); };
    if (a == "--task") task = value();
    else if (a == "--target") {
      std::string t = value();
      char* end = nullptr;
      target = std::strtod(t.c_str(), &end);
      if (t.empty() || *end) die("--target: not a number: " + t);
    } else if (a == "--out-md") out_md = value();
    else if (a == "--out-svg") out_svg = value();
    else if (a.rfind("--", 0) == 0) die("unknown option " + a);
    else {  // <config>_seed<N>.json, configurations in order of first appearance
      std::string stem = a.substr(a.find_last_of('/') + 1);
      if (stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".json") == 0) stem.resize(stem.size() - 5);
      size_t at = stem.rfind("_seed");
      std::string name = stem, seed = stem.substr(at == std::string::npos ? stem.size() : at + 5);
      Run r = load(a);
      if (at != std::string::npos && !seed.empty() && seed.find_first_not_of("0123456789") == std::string::npos)
        name = stem.substr(0, at), r.seed = std::stoi(seed);
      auto c = std::find_if(configs.begin(), configs.end(), [&](const Config& x) { return x.name == name; });
      if (c == configs.end()) c = configs.insert(configs.end(), Config{name, {}});
      c->runs.push_back(std::move(r));
    }
  }
  if ((task != "fmnist" && task != "gpt") || std::isnan(target) || configs.empty())
    die("usage: tta_report --task fmnist|gpt --target T [--out-md F.md] [--out-svg F.svg] <config>_seed<N>.json...");
  const bool acc = task == "fmnist";
  const std::string metric = acc ? "test_accuracy" : "test_loss";
  auto reached = [&](double v) { return acc ? v >= target : v <= target; };

  std::ostringstream md;
  std::string model = "n/a";
  for (Config& c : configs) {
    std::stable_sort(c.runs.begin(), c.runs.end(), [](const Run& a, const Run& b) { return a.seed < b.seed; });
    for (const Run& r : c.runs)
      if (model == "n/a" && !r.failed) model = str(r.j, "model");
  }
  std::string goal = acc ? "test accuracy ≥ " + fmt("%g", target) : "validation loss ≤ " + fmt("%g", target);
  const std::string dataset = acc ? "fashion-mnist" : "fortunes";
  md << "## Time to accuracy: " << model << " on " << dataset << ", " << goal << "\n\n"
     << "Median over seeds, (min–max) when more than one.\n\n"
     << "| configuration | plan | async | throughput (samples/s) | epochs to target | train s to target | "
        "wall s to target | final " << (acc ? "accuracy" : "loss") << " | weight memory per rank | "
        "before training s |\n"
     << "|---|---|---|--:|--:|--:|--:|--:|--:|--:|\n";
  for (const Config& c : configs) {
    std::vector<double> tput, epochs, train_s, wall_s, final_v, before;
    double bytes = NAN, versions = NAN;
    int ok = 0, hit = 0, with_history = 0, n = int(c.runs.size());
    const Json* first = nullptr;
    for (const Run& r : c.runs) {
      if (r.failed) continue;
      ++ok, first = first ? first : &r.j;
      tput.push_back(num(r.j, "throughput"));
      if (r.j.contains("planner")) before.push_back(beforeTraining(r.j["planner"]));
      std::vector<Point> h = history(r.j, metric);
      with_history += !h.empty();
      auto p = std::find_if(h.begin(), h.end(), [&](const Point& q) { return reached(q.value); });
      if (p != h.end()) ++hit, epochs.push_back(p->epoch), train_s.push_back(p->train_s), wall_s.push_back(p->wall_s);
      double fin = num(r.j, metric);
      final_v.push_back(std::isnan(fin) && !h.empty() ? h.back().value : fin);
      if (r.j.contains("ranks") && r.j["ranks"].is_array())
        for (const Json& rk : r.j["ranks"]) {
          double b = num(rk, "weight_bytes"), v = num(rk, "weight_versions");
          if (!std::isnan(b)) bytes = std::isnan(bytes) ? b : std::max(bytes, b);
          if (!std::isnan(v)) versions = std::isnan(versions) ? v : std::max(versions, v);
        }
    }
    md << "| " << c.name << (ok < n ? " (" + std::to_string(n - ok) + "/" + std::to_string(n) + " failed)" : "");
    if (!first) {
      md << " | failed | | | | | | | | |\n";
      continue;
    }
    std::string async = first->contains("asynchronous") && (*first)["asynchronous"].is_boolean()
                            ? ((*first)["asynchronous"] == true ? "yes" : "no") : "n/a";
    std::string part = hit < ok ? ", " + std::to_string(hit) + "/" + std::to_string(ok) + " seeds" : "";
    std::string mem = std::isnan(bytes) ? "n/a" : fmt("%.1f MiB", bytes / (1024.0 * 1024.0));
    if (!std::isnan(bytes) && !std::isnan(versions))
      mem += " (" + fmt("%g", versions) + (versions == 1 ? " version)" : " versions)");
    md << " | " << planText(*first) << " | " << async << " | " << agg(tput, "%.1f") << " | "
       << (hit ? agg(epochs, "%g") + part : with_history ? "not reached" : "n/a") << " | " << (hit ? agg(train_s, "%.1f") + part : "—")
       << " | " << (hit ? agg(wall_s, "%.1f") + part : "—") << " | " << agg(final_v, acc ? "%.4f" : "%.3f") << " | "
       << mem << " | " << (before.empty() ? "—" : agg(before, "%.1f")) << " |\n";
  }
  if (!out_svg.empty()) {
    std::string title = "Time to " + goal + ": " + model + " on " + dataset;
    if (!(std::ofstream(out_svg) << plot(configs, metric, title, target))) die(out_svg + ": cannot write");
    md << "\n![" << (acc ? "test accuracy" : "validation loss") << " against wall-clock time]("
       << out_svg.substr(out_svg.find_last_of('/') + 1) << ")\n";
  }
  if (!out_md.empty() && !(std::ofstream(out_md) << md.str())) die(out_md + ": cannot write");
  std::cout << md.str();
  return 0;
}
