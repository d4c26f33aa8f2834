// Internal to the report: its charts as inline SVG.
#pragma once

#include <string>

#include "pipetrain/report/report.h"

namespace pipetrain::report {

// "12.5%", "3.2 MiB", "14.1 ms", or "n/a" for NaN.
std::string formatValue(double value, Unit unit);
std::string barChartSvg(const BarChart& chart);
std::string lineChartSvg(const LineChart& chart);

}  // namespace pipetrain::report
