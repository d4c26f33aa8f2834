// Validator for Programs: the contract both executors rely on.
//
// Checks: every stage and micro-batch has one F and one B (or one I then one W) on
// the rank that owns it; every SEND has exactly one matching RECV; a compute action's
// inputs are produced earlier on its rank or received before it; weight versions are
// created in order by STEP and exist when read; under stashing a backward pass reads
// the version its forward pass read; and the Program runs to completion when executed
// symbolically (no deadlock), with replicas meeting at their ALLREDUCEs.
#pragma once

#include <functional>
#include <string>

#include "pipetrain/schedule/program.h"

namespace pipetrain::schedule {

// Where an action was written, for messages ("line 2, column 7" of a user's CSV), or "".
using ActionLocator = std::function<std::string(const Action&)>;

// Throws Error naming the rank, the position and the action (and where it was written,
// when `where` knows), followed by that rank's actions around it with the offending one
// in [brackets].
void validate(const Program& program, const ActionLocator& where = {});

// The contract of a channel that matches messages by their order instead of a tag
// (NCCL's point-to-point calls between two ranks): for every ordered pair of ranks, the
// sender posts its messages to the receiver in the order the receiver posts their
// receives. REQUIRES: validate(program) passed. Throws Error naming the two ranks, the
// first message where the orders part and the positions of both.
void validateInOrderDelivery(const Program& program);

}  // namespace pipetrain::schedule
