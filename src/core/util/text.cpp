#include "pipetrain/util/text.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "pipetrain/util/error.h"
#include "pipetrain/util/limits.h"

namespace pipetrain::text {

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

namespace {

std::size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

// "; did you mean 'train'?" for the nearest of `known` within a third of the name's
// length (at least 2 edits), else "".
std::string didYouMean(const std::string& name, const std::vector<std::string>& known) {
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, name.size() / 3) + 1;
  for (const std::string& k : known)
    if (const std::size_t d = editDistance(name, k); d < best_distance) best = k, best_distance = d;
  return best.empty() ? "" : "; did you mean " + best + "?";
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

namespace {

// Writes all of `size` bytes and syncs them to the disk; false on any failure.
bool writeAndSync(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return ::fsync(fd) == 0;
}

}  // namespace

void checkWritable(const std::string& path, const std::string& what) {
  const std::string probe = path + ".tmp";  // where writeFileAtomically writes first
  const bool ok = static_cast<bool>(std::ofstream(probe));
  std::remove(probe.c_str());
  if (!ok) throw Error(what + " " + path + ": cannot write there (does the folder exist?)");
}

void writeFileAtomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(path + ": cannot write file (" + std::strerror(errno) + ")");
  const bool written = writeAndSync(fd, content.data(), content.size());
  const int write_errno = errno;
  if (::close(fd) != 0 || !written) {
    std::remove(tmp.c_str());
    throw Error(path + ": write failed (" + std::strerror(written ? errno : write_errno) + ")");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error(path + ": cannot replace file (" + std::strerror(errno) + ")");
  }
  // The rename itself lasts only once the folder's entry is on disk.
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const int dir = ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

std::string fixed(double value, int decimals) {
  char buf[400];  // DBL_MAX has 309 digits before the point
  std::snprintf(buf, sizeof buf, "%.*f", std::clamp(decimals, 0, 30), value);
  std::string s = buf;
  if (s.find_first_not_of("-0.") == std::string::npos && s[0] == '-') s.erase(0, 1);
  return s;
}

std::string format(const char* printf_format, double value) {
  // Sized by a first pass: a fixed buffer cut a report fact's text at 64 bytes.
  const int length = std::snprintf(nullptr, 0, printf_format, value);
  if (length <= 0) return "";
  std::string out(static_cast<std::size_t>(length) + 1, '\0');
  std::snprintf(out.data(), out.size(), printf_format, value);
  out.pop_back();
  return out;
}

std::string humanBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) {
    bytes /= 1024;
    ++u;
  }
  char buf[40];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", bytes, units[u]);
  return buf;
}

int64_t parseBytes(const std::string& text, const std::string& what) {
  auto refuse = [&](const std::string& why) -> int64_t {
    throw Error(what + ": '" + text + "' " + why + " (e.g. 512MiB, 2GiB, 1.5GB or a plain number of bytes)");
  };
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    return refuse("is not a size");
  }
  std::string unit = text.substr(used);
  unit.erase(0, unit.find_first_not_of(' '));
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::pair<const char*, double> units[] = {{"", 1},          {"b", 1},           {"kib", 1024.0},
                                                  {"mib", 1 << 20}, {"gib", 1 << 30},   {"tib", 1099511627776.0},
                                                  {"kb", 1e3},      {"mb", 1e6},        {"gb", 1e9},
                                                  {"tb", 1e12}};
  for (const auto& [name, factor] : units) {
    if (unit != name) continue;
    const double bytes = value * factor;
    if (!(bytes >= 1)) return refuse("is less than a byte");
    if (bytes > static_cast<double>(limits::kMaxBytes)) return refuse("is more than pipetrain serves");
    return static_cast<int64_t>(bytes);
  }
  return refuse("has an unknown unit '" + unit + "'");
}

std::string xmlEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') ? ' ' : c;
    }
  }
  return out;
}

}  // namespace pipetrain::text
