#include "svg_style.h"

#include <array>
#include <cmath>
#include <cstdio>

namespace pipetrain::trace::svg {
namespace {

using schedule::ActionType;

// Indexed by ActionType. Forward and backward families are far apart on the colour
// wheel; the zero-bubble split keeps B's hue (I lighter, W teal) so that a ZB picture
// still reads as "forward vs backward" at a glance.
constexpr std::array<TypeStyle, schedule::kNumActionTypes> kStyles = {{
    {"#4e79a7", "forward"},             // F
    {"#59a14f", "backward"},            // B
    {"#8cd17d", "backward (input)"},    // I
    {"#3f8f8a", "backward (weight)"},   // W
    {"#a9c4de", "send activation"},     // SEND_F
    {"#a9c4de", "receive activation"},  // RECV_F
    {"#a8d19e", "send gradient"},       // SEND_B
    {"#a8d19e", "receive gradient"},    // RECV_B
    {"#8c939d", "optimizer step"},      // STEP
    {"#8e6bbf", "all-reduce"},          // ALLREDUCE
}};
// The array's size is the count already; a style left out would have no colour.
constexpr bool everyTypeStyled() {
  for (const TypeStyle& style : kStyles)
    if (style.fill == nullptr) return false;
  return true;
}
static_assert(everyTypeStyled(), "every action type needs a Gantt style");

// A generous average advance for DejaVu Sans / Helvetica digits and lower case.
constexpr double kCharWidth = 0.62;

void parseHex(const std::string& hex, unsigned rgb[3]) {
  rgb[0] = rgb[1] = rgb[2] = 0;
  std::sscanf(hex.c_str(), "#%02x%02x%02x", &rgb[0], &rgb[1], &rgb[2]);
}

}  // namespace

const TypeStyle& styleOf(ActionType type) { return kStyles[static_cast<std::size_t>(type)]; }

double textWidth(const std::string& s, double font_size) {
  std::size_t chars = 0;  // UTF-8 code points, not bytes
  for (unsigned char c : s) chars += (c & 0xC0) != 0x80;
  return static_cast<double>(chars) * font_size * kCharWidth;
}

std::string darken(const std::string& hex, double amount) {
  unsigned rgb[3];
  parseHex(hex, rgb);
  for (unsigned& c : rgb) c = static_cast<unsigned>(std::lround(c * (1 - amount))) & 0xFF;
  char out[8];
  std::snprintf(out, sizeof out, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
  return out;
}

// By relative luminance (WCAG), not by type: shading a light fill for a later stage
// can carry it across to where white reads better.
const char* inkOn(const std::string& fill) {
  unsigned rgb[3];
  parseHex(fill, rgb);
  const double weights[3] = {0.2126, 0.7152, 0.0722};
  double luminance = 0;
  for (int i = 0; i < 3; ++i) {
    const double c = rgb[i] / 255.0;
    luminance += weights[i] * (c <= 0.04045 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4));
  }
  return luminance > 0.3 ? kInk : "#ffffff";
}

}  // namespace pipetrain::trace::svg
