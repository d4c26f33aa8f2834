// Small text helpers shared by readers, error messages and reports.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pipetrain::text {

// The whole file; throws Error("<path>: cannot open file") when it cannot be read.
std::string readFile(const std::string& path);

// Writes `content` to `path` atomically and durably: to `path`.tmp, synced, renamed over
// `path`, and the folder synced, so a crash never leaves a half-written file where a good
// one was, nor loses the rename. Error names the path.
void writeFileAtomically(const std::string& path, const std::string& content);

// Fails early, before any long work, where writeFileAtomically could not write `path`:
// an Error naming `what` (the option that gave it) and the path. Leaves no file behind.
void checkWritable(const std::string& path, const std::string& what);

// `value` through a printf format with one double conversion ("%.1f%%"): table cells.
std::string format(const char* printf_format, double value);

// `value` with exactly `decimals` digits after the point ("-0.0" printed as "0.0"; at
// most 30 digits are kept).
std::string fixed(double value, int decimals);

// "12.3 GiB", "512.0 MiB", "900 B": one decimal is what a user compares against a data sheet.
std::string humanBytes(double bytes);

// "512MiB", "2 GiB", "1.5GB", "1048576": a byte count with an optional binary (KiB, MiB,
// GiB, TiB) or decimal (KB, MB, GB, TB) unit, case-insensitive. Throws Error naming
// `what` for anything else, a count below 1 or above limits::kMaxBytes.
int64_t parseBytes(const std::string& text, const std::string& what);

// "a, b, c": names for a message.
std::string joined(const std::vector<std::string>& names);

// "; did you mean 'train'?" for the nearest of `known` within a third of the name's
// length (at least 2 edits), else "".
std::string didYouMean(const std::string& name, const std::vector<std::string>& known);

// Escapes the five XML specials (so also safe in HTML text and attributes); control
// characters, which XML 1.0 forbids even escaped, become spaces.
std::string xmlEscape(const std::string& s);

}  // namespace pipetrain::text
