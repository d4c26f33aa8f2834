#include "pipetrain/schedule/action.h"

#include <array>
#include <cctype>
#include <cstring>

#include "pipetrain/util/error.h"

namespace pipetrain::schedule {
namespace {

constexpr std::array<const char*, kNumActionTypes> kNames = {
    "F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "STEP", "ALLREDUCE"};
// The array's size is the count already; a name left out would be a null pointer.
constexpr bool everyTypeNamed() {
  for (const char* name : kNames)
    if (name == nullptr) return false;
  return true;
}
static_assert(everyTypeNamed(), "every action type needs a text name");

bool hasMicrobatch(ActionType t) { return t != ActionType::STEP && t != ActionType::ALLREDUCE; }

// The stage on the other side when the text form leaves it out: the chain neighbour.
int defaultPeer(ActionType t, int stage) {
  switch (t) {
    case ActionType::SEND_F:
    case ActionType::RECV_B: return stage + 1;
    case ActionType::RECV_F:
    case ActionType::SEND_B: return stage - 1;
    default: return -1;
  }
}

}  // namespace

const char* name(ActionType type) { return kNames[static_cast<int>(type)]; }

bool isCompute(ActionType t) {
  return t == ActionType::F || t == ActionType::B || t == ActionType::I || t == ActionType::W;
}
bool isBackward(ActionType t) { return t == ActionType::B || t == ActionType::I || t == ActionType::W; }
bool isComm(ActionType t) {
  return t == ActionType::SEND_F || t == ActionType::RECV_F || t == ActionType::SEND_B ||
         t == ActionType::RECV_B;
}
bool isSend(ActionType t) { return t == ActionType::SEND_F || t == ActionType::SEND_B; }


MessageKey messageOf(const Action& a) {
  switch (a.type) {
    case ActionType::SEND_F: return {false, a.stage, a.peer_stage, a.microbatch};
    case ActionType::RECV_F: return {false, a.peer_stage, a.stage, a.microbatch};
    case ActionType::SEND_B: return {true, a.peer_stage, a.stage, a.microbatch};
    default: return {true, a.stage, a.peer_stage, a.microbatch};  // RECV_B
  }
}

std::string toString(const Action& a) {
  std::string s = std::to_string(a.stage) + name(a.type);
  if (hasMicrobatch(a.type)) s += std::to_string(a.microbatch);
  if (isComm(a.type)) {
    const bool sends = a.type == ActionType::SEND_F || a.type == ActionType::SEND_B;
    s += (sends ? ">" : "<") + std::to_string(a.peer_stage);
  }
  if (a.version >= 0) s += "v" + std::to_string(a.version);
  return s;
}

Action parseAction(const std::string& text) {
  auto fail = [&](const std::string& why) -> Action {
    throw Error("cannot parse action \"" + text + "\": " + why +
                " (expected e.g. 0F1, 1B3, 2W0v1, 0SEND_F1>1, 3STEP)");
  };
  std::size_t pos = 0;
  auto readNumber = [&](int& out) {
    std::size_t start = pos;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
    if (pos == start || pos - start > 9) return false;
    out = std::stoi(text.substr(start, pos - start));
    return true;
  };

  Action a;
  if (!readNumber(a.stage)) fail("it must start with a stage number");
  // Longest type name first, so that "SEND_F" is not read as something shorter.
  int best = -1;
  std::size_t best_len = 0;
  for (int t = 0; t < kNumActionTypes; ++t) {
    std::size_t len = std::strlen(kNames[t]);
    if (len > best_len && text.compare(pos, len, kNames[t]) == 0) {
      best = t;
      best_len = len;
    }
  }
  if (best < 0) fail("unknown action type after the stage number");
  a.type = static_cast<ActionType>(best);
  pos += best_len;

  if (hasMicrobatch(a.type) && !readNumber(a.microbatch)) fail("a micro-batch number must follow the type");
  if (isComm(a.type)) {
    a.peer_stage = defaultPeer(a.type, a.stage);
    const bool sends = a.type == ActionType::SEND_F || a.type == ActionType::SEND_B;
    if (pos < text.size() && (text[pos] == '>' || text[pos] == '<')) {
      if (text[pos] != (sends ? '>' : '<')) fail(sends ? "a send names its peer with '>'" : "a receive names its peer with '<'");
      ++pos;
      if (!readNumber(a.peer_stage)) fail("a stage number must follow '>' or '<'");
    }
    if (a.peer_stage < 0) fail("stage 0 has no previous stage");
  }
  if (pos < text.size() && text[pos] == 'v') {
    ++pos;
    if (!readNumber(a.version)) fail("a version number must follow 'v'");
  }
  if (pos != text.size()) fail("unexpected text \"" + text.substr(pos) + "\"");
  return a;
}

namespace {
constexpr const char* kOverlapSuffix = ")OVERLAP_F_B";
}  // namespace

std::vector<std::string> toStrings(const std::vector<Action>& actions) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < actions.size(); ++i) {
    if (actions[i].overlap_next && i + 1 < actions.size()) {
      out.push_back("(" + toString(actions[i]) + ";" + toString(actions[i + 1]) + kOverlapSuffix);
      ++i;
      continue;
    }
    out.push_back(toString(actions[i]));
  }
  return out;
}

std::vector<Action> parseActions(const std::string& text) {
  if (text.empty() || text[0] != '(') return {parseAction(text)};
  const std::string suffix = kOverlapSuffix;
  const std::size_t semicolon = text.find(';');
  if (text.size() <= suffix.size() || text.compare(text.size() - suffix.size(), suffix.size(), suffix) != 0 ||
      semicolon == std::string::npos)
    throw Error("cannot parse action \"" + text + "\": an overlapped pair is written (0F3;1B2)OVERLAP_F_B");
  Action forward = parseAction(text.substr(1, semicolon - 1));
  Action backward = parseAction(text.substr(semicolon + 1, text.size() - suffix.size() - semicolon - 1));
  if (forward.type != ActionType::F || backward.type != ActionType::B)
    throw Error("cannot parse action \"" + text + "\": an overlapped pair is a forward then a full backward, e.g. "
                "(0F3;1B2)OVERLAP_F_B");
  forward.overlap_next = true;
  return {forward, backward};
}

}  // namespace pipetrain::schedule
