// Series-parallel decomposition of a LayerGraph: the tree GraphPipe's partitioner
// searches. A series node runs its children one after another (every edge between
// them goes forward); a parallel node's children are independent branches (no edge
// between them; they share what comes before and after). Any run of consecutive
// children of either kind is a convex set of layers, so it can be one pipeline stage.
//
// How the tree is found. In a region's topological order, a layer that no edge jumps
// over (the region's entry and exit counted as the edges' ends outside it) lies on
// every path through the region: it is a series point, and the layers between two
// series points form one child. A child whose layers fall apart into weakly connected
// parts is a parallel node of those parts. A part that is connected and has no series
// point (e.g. two branches joined by a cross edge) is not series-parallel: it is made
// so by taking its layers in topological order as a series of single layers, which
// keeps every stage convex and gives up running its branches side by side. The note
// names such parts. Each parallel node also offers its layers as a series by level
// (SpNode::by_level), so that stages may cut across its branches; and a parallel child
// of a series node offers its last branches joined to the children after it
// (SpNode::joins), so that a stage may hold a branch's tail with the layers that merge
// the branches, as a sequential partition's stages do.
#pragma once

#include <string>
#include <vector>

#include "pipetrain/graph/layer_graph.h"

namespace pipetrain::graph {

struct SpNode {
  enum class Kind { kLayer, kSeries, kParallel };
  Kind kind = Kind::kLayer;
  int layer = -1;               // kLayer: the layer's index in the graph
  std::vector<int> children;    // kSeries: in order; kParallel: branches in topological order
  std::vector<int> layers;      // every layer below, in the graph's topological order
  // kParallel: a kSeries node of the same layers one by one, ordered by their distance
  // from the part's entry. Runs of it are stages that cut across branches (the first
  // layers of every branch together), which the branches alone cannot form: the
  // partitioner tries it as an alternative to the branches. -1 otherwise.
  int by_level = -1;
  // kSeries: for each child c that is a parallel node with more children after it, and
  // each k from 1 to its branches - 1, a kSeries node `series` of its branches k.. (one
  // branch: its own children; more: a kParallel node of them) followed by this node's
  // children after c. A partition of it, run after the branches before k, puts branch
  // tails in one stage with the join (a stage no run of this tree forms otherwise).
  // Only nodes of the decomposition carry joins, not the nodes they add.
  struct Join {
    int child;     // the parallel child's index in `children`
    int apart;     // k: its branches [0, k) stay apart
    int series;    // the added kSeries node
  };
  std::vector<Join> joins;
};

struct SpTree {
  std::vector<SpNode> nodes;
  int root = -1;
  // One line per part that was not series-parallel and was taken as a series of single
  // layers, naming its first and last layer; empty when the graph is series-parallel.
  std::vector<std::string> linearised;
};

SpTree seriesParallel(const LayerGraph& graph);

// Whether the tree has a parallel node: branches that could run side by side.
bool hasBranches(const SpTree& tree);

}  // namespace pipetrain::graph
