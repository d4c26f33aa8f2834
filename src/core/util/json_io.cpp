#include "pipetrain/util/json_io.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "pipetrain/util/limits.h"
#include "pipetrain/util/text.h"

namespace pipetrain::json_io {
namespace {

std::string typeName(const Json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a boolean";
  if (j.is_number()) return "a number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "an array";
  return "an object";
}

// A value as an error message quotes it: at most 40 characters.
std::string quote(const Json& j) {
  std::string s = j.dump();
  return s.size() <= 40 ? s : s.substr(0, 37) + "...";
}

}  // namespace

Json readFile(const std::string& path) {
  const std::string content = text::readFile(path);
  // The parser would stop at a NUL and ignore what follows; a file is JSON or it is not.
  if (const auto nul = content.find('\0'); nul != std::string::npos)
    throw Error(path + ": not valid JSON (byte " + std::to_string(nul + 1) + "): a NUL byte");
  struct TooDeep {};
  // Deeper documents are refused while parsing: printing or freeing them recursively
  // would overflow the stack, and no pipetrain format nests beyond a few levels.
  const Json::parser_callback_t depth_check = [](int depth, Json::parse_event_t, Json&) {
    if (depth > limits::kMaxJsonDepth) throw TooDeep{};
    return true;
  };
  try {
    return Json::parse(content, depth_check);
  } catch (const TooDeep&) {
    throw Error(path + ": not valid here: nested deeper than " + std::to_string(limits::kMaxJsonDepth) + " levels");
  } catch (const Json::parse_error& e) {
    throw Error(path + ": not valid JSON (byte " + std::to_string(e.byte) + "): " + e.what());
  } catch (const Json::out_of_range& e) {  // a number beyond double's range, e.g. 1e309
    throw Error(path + ": not valid here: " + e.what());
  }
}

void writeFile(const std::string& path, const Json& value) { text::writeFileAtomically(path, value.dump(2) + "\n"); }

bool JsonCursor::has(const std::string& key) const {
  return node_->is_object() && node_->contains(key);
}

JsonCursor JsonCursor::field(const std::string& key) const {
  if (!node_->is_object()) fail("expected an object, found " + typeName(*node_));
  auto it = node_->find(key);
  if (it == node_->end()) fail("missing field \"" + key + "\"");
  return child(*it, path_.empty() ? key : path_ + "." + key);
}

JsonCursor JsonCursor::at(std::size_t index) const {
  if (!node_->is_array()) fail("expected an array, found " + typeName(*node_));
  if (index >= node_->size()) fail("index " + std::to_string(index) + " out of range");
  return child((*node_)[index], path_ + "[" + std::to_string(index) + "]");
}

std::string JsonCursor::asString() const {
  if (!node_->is_string()) fail("expected a string, found " + typeName(*node_));
  return node_->get<std::string>();
}

double JsonCursor::asNumber() const {
  if (!node_->is_number()) fail("expected a number, found " + typeName(*node_));
  double v = node_->get<double>();
  if (!std::isfinite(v)) fail("expected a finite number");
  return v;
}

int64_t JsonCursor::asInt() const {
  if (!node_->is_number_integer()) fail("expected an integer, found " + quote(*node_));
  if (node_->is_number_unsigned() && node_->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    fail("the integer " + quote(*node_) + " is too large");
  return node_->get<int64_t>();
}

int64_t JsonCursor::asIntIn(int64_t lo, int64_t hi) const {
  const int64_t v = asInt();
  if (v < lo || v > hi)
    fail("must be between " + std::to_string(lo) + " and " + std::to_string(hi) + " (found " + std::to_string(v) + ")");
  return v;
}

double JsonCursor::asNumberIn(double lo, double hi) const {
  const double v = asNumber();
  if (v < lo || v > hi) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "must be between %g and %g (found %s)", lo, hi, quote(*node_).c_str());
    fail(buf);
  }
  return v;
}

int64_t JsonCursor::asBytes() const {
  // A size may be written as a whole number in exponent form ("memory_bytes": 80e9),
  // which JSON reads as a floating-point number.
  if (node_->is_number_float()) {
    const double v = asNumberIn(0, static_cast<double>(limits::kMaxBytes));
    if (v != std::floor(v)) fail("expected a whole number of bytes, found " + quote(*node_));
    return static_cast<int64_t>(v);
  }
  return asIntIn(0, limits::kMaxBytes);
}

double JsonCursor::asSeconds() const { return asNumberIn(0, limits::kMaxSeconds); }

int64_t JsonCursor::asNonNegativeInt() const {
  int64_t v = asInt();
  if (v < 0) fail("must not be negative (found " + std::to_string(v) + ")");
  return v;
}

bool JsonCursor::asBool() const {
  if (!node_->is_boolean()) fail("expected true or false, found " + typeName(*node_));
  return node_->get<bool>();
}

std::vector<JsonCursor> JsonCursor::asArray() const {
  if (!node_->is_array()) fail("expected an array, found " + typeName(*node_));
  std::vector<JsonCursor> out;
  out.reserve(node_->size());
  for (std::size_t i = 0; i < node_->size(); ++i) out.push_back(at(i));
  return out;
}

std::vector<std::string> JsonCursor::asStringArray() const {
  std::vector<std::string> out;
  for (const auto& item : asArray()) out.push_back(item.asString());
  return out;
}

std::string JsonCursor::stringOr(const std::string& key, const std::string& fallback) const {
  return has(key) ? field(key).asString() : fallback;
}
double JsonCursor::numberOr(const std::string& key, double fallback) const {
  return has(key) ? field(key).asNumber() : fallback;
}
int64_t JsonCursor::intOr(const std::string& key, int64_t fallback) const {
  return has(key) ? field(key).asInt() : fallback;
}
bool JsonCursor::boolOr(const std::string& key, bool fallback) const {
  return has(key) ? field(key).asBool() : fallback;
}

void JsonCursor::allowOnly(const std::vector<std::string>& allowed) const {
  if (!node_->is_object()) fail("expected an object, found " + typeName(*node_));
  for (const auto& item : node_->items()) {
    if (std::find(allowed.begin(), allowed.end(), item.key()) == allowed.end()) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      fail("unknown field \"" + item.key() + "\" (known fields: " + list + ")");
    }
  }
}

void JsonCursor::fail(const std::string& message) const { throw Error(where() + ": " + message); }

void checkHeader(const JsonCursor& root, const std::string& format, int version) {
  if (!root.node().is_object()) root.fail("expected a JSON object at the top level");
  std::string found = root.field("format").asString();
  if (found != format)
    root.fail("this is a \"" + found + "\" file, expected a \"" + format + "\" file");
  int64_t v = root.field("version").asInt();
  if (v != version)
    root.fail("\"" + format + "\" version " + std::to_string(v) + " is not supported; this " +
              "pipetrain reads version " + std::to_string(version) +
              " (regenerate the file with this pipetrain, or upgrade pipetrain)");
}

Json header(const std::string& format, int version) {
  return Json{{"format", format}, {"version", version}};
}

}  // namespace pipetrain::json_io
