// Strict JSON reading with context-carrying errors, shared by every file format.
//
// Every file pipetrain writes has "format" and "version" fields; readers call
// checkHeader() first, then read fields through JsonCursor so that a missing or
// mistyped field is reported with its full path, e.g.
//   "cluster.json: devices[2].memory_bytes: expected a number, found a string".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipetrain/util/error.h"

namespace pipetrain::json_io {

using Json = nlohmann::json;

// Reads and parses a JSON file; a missing file or a syntax error becomes an Error
// naming the file (and the byte offset for syntax errors).
Json readFile(const std::string& path);

// Writes `value` pretty-printed, atomically: to a temporary file, then renamed, so a
// crash never leaves a half-written file where a good one was.
void writeFile(const std::string& path, const Json& value);

// A position inside a JSON document plus the human-readable path to it.
class JsonCursor {
 public:
  // `origin` names the document (usually the file name); `path` is the position in it.
  JsonCursor(const Json& node, std::string origin, std::string path = "")
      : node_(&node), origin_(std::move(origin)), path_(std::move(path)) {}

  const Json& node() const { return *node_; }
  // "plan.json: stages[3].layers" (or just "plan.json" at the root).
  std::string where() const { return path_.empty() ? origin_ : origin_ + ": " + path_; }

  bool has(const std::string& key) const;
  JsonCursor field(const std::string& key) const;  // REQUIRES: an object with `key`
  JsonCursor at(std::size_t index) const;

  // Typed accessors: throw Error("<path>: expected ..., found ...") on a mismatch.
  std::string asString() const;
  double asNumber() const;
  int64_t asInt() const;
  int64_t asNonNegativeInt() const;
  // Range-checked: an Error names both bounds and the value found.
  int64_t asIntIn(int64_t lo, int64_t hi) const;
  double asNumberIn(double lo, double hi) const;
  int64_t asBytes() const;    // 0 .. limits::kMaxBytes
  double asSeconds() const;   // 0 .. limits::kMaxSeconds
  bool asBool() const;
  std::vector<JsonCursor> asArray() const;
  std::vector<std::string> asStringArray() const;

  // Shorthands for optional fields.
  std::string stringOr(const std::string& key, const std::string& fallback) const;
  double numberOr(const std::string& key, double fallback) const;
  int64_t intOr(const std::string& key, int64_t fallback) const;
  bool boolOr(const std::string& key, bool fallback) const;

  // Rejects keys outside `allowed` (catches typos such as "memroy_bytes").
  void allowOnly(const std::vector<std::string>& allowed) const;

  [[noreturn]] void fail(const std::string& message) const;

 private:
  JsonCursor child(const Json& node, const std::string& path) const {
    return JsonCursor(node, origin_, path);
  }

  const Json* node_;
  std::string origin_;
  std::string path_;
};

// Checks {"format": format, "version": version}; the message says how to fix a
// mismatch (for example which pipetrain version writes that file version).
void checkHeader(const JsonCursor& root, const std::string& format, int version);

// The header every writer puts first.
Json header(const std::string& format, int version);

}  // namespace pipetrain::json_io
