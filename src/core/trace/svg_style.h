// Internal to the trace module: the look of the SVG Gantt chart (palette, text
// metrics, colour arithmetic, XML escaping), kept apart from its layout.
#pragma once

#include <string>

#include "pipetrain/schedule/action.h"

namespace pipetrain::trace::svg {

struct TypeStyle {
  const char* fill;    // "#rrggbb"
  const char* legend;  // what the legend calls it
};
const TypeStyle& styleOf(schedule::ActionType type);

inline constexpr const char* kFont = "DejaVu Sans, Helvetica, Arial, sans-serif";
inline constexpr const char* kInk = "#1f2933";
inline constexpr const char* kMuted = "#6b7280";
inline constexpr const char* kIdle = "#eef1f5";
inline constexpr const char* kGrid = "#d5dae1";
inline constexpr const char* kActivationWire = "#9dbbd9";
inline constexpr const char* kPairOutline = "#d9822b";  // overlapped F&B pairs
inline constexpr const char* kGradientWire = "#9fcd93";

// Estimated advance of `s` (UTF-8) at `font_size` px. There is no font engine here,
// so the estimate errs wide: a label judged to fit really fits.
double textWidth(const std::string& s, double font_size);

// `hex` ("#rrggbb") darkened by `amount` in [0, 1].
std::string darken(const std::string& hex, double amount);

// Label ink readable on `fill` ("#rrggbb"): dark on light fills, white on dark ones.
const char* inkOn(const std::string& fill);

}  // namespace pipetrain::trace::svg
