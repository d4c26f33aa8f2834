// The order in which a chain of stages meets a cluster's devices.
#pragma once

#include "pipetrain/cluster/cluster_spec.h"

namespace pipetrain::cluster {

// Links whose bandwidths are this far apart are told apart; nearer, they are alike, so
// that the noise between measurements of like links never splits a uniform network.
constexpr double kLinkSpread = 1.5;

// `cluster` with its innermost groups (level 0's groups where it has several levels, else
// its devices) reordered so that each group after the first is one of the fastest to
// reach from the group before it. The chain partitioner lays stages over consecutive
// devices, so a slow explicit link between two groups then sits at the chain's end,
// where a plan can leave it out or cut where little crosses, not in its middle. Groups
// whose bandwidth from the last one is within `spread` of the fastest's keep their
// order; a cluster without links is returned as it is.
// REQUIRES: spread >= 1.
ClusterSpec chainOrder(const ClusterSpec& cluster, double spread = kLinkSpread);

}  // namespace pipetrain::cluster
