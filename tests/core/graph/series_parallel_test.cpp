#include "pipetrain/graph/series_parallel.h"

#include <gtest/gtest.h>

#include <functional>

namespace pipetrain::graph {
namespace {

LayerGraph graphOf(const std::vector<std::pair<std::string, std::vector<std::string>>>& edges) {
  std::vector<Layer> layers;
  for (const auto& [name, inputs] : edges) {
    Layer l;
    l.name = name;
    l.inputs = inputs;
    l.forward_seconds = 1;
    layers.push_back(l);
  }
  return LayerGraph(layers, 1);
}

// The tree as text: layers by name, S(...) for series, P(...) for parallel.
std::string show(const LayerGraph& g, const SpTree& t, int node) {
  const SpNode& n = t.nodes[node];
  if (n.kind == SpNode::Kind::kLayer) return g.layer(n.layer).name;
  std::string out = n.kind == SpNode::Kind::kSeries ? "S(" : "P(";
  for (std::size_t i = 0; i < n.children.size(); ++i) out += (i ? " " : "") + show(g, t, n.children[i]);
  return out + ")";
}

std::string decomposed(const LayerGraph& g) {
  const SpTree t = seriesParallel(g);
  return show(g, t, t.root);
}

TEST(SeriesParallel, AChainIsOneSeries) {
  EXPECT_EQ(decomposed(graphOf({{"a", {}}, {"b", {"a"}}, {"c", {"b"}}})), "S(a b c)");
  EXPECT_EQ(decomposed(graphOf({{"a", {}}})), "a");
}

TEST(SeriesParallel, BranchesBetweenAForkAndAJoinAreParallel) {
  const auto g = graphOf({{"fork", {}}, {"a1", {"fork"}}, {"a2", {"a1"}}, {"b1", {"fork"}}, {"join", {"a2", "b1"}}});
  EXPECT_EQ(decomposed(g), "S(fork P(S(a1 a2) b1) join)");
}

TEST(SeriesParallel, BranchesReadingTheModelInputAreParallel) {
  const auto g = graphOf({{"x0", {}}, {"x1", {"x0"}}, {"y0", {}}, {"z0", {}}, {"head", {"x1", "y0", "z0"}}});
  EXPECT_EQ(decomposed(g), "S(P(S(x0 x1) y0 z0) head)");
}

TEST(SeriesParallel, ASkipConnectionKeepsTheSeries) {
  // The residual's identity branch has no layers: the block is a series.
  const auto g = graphOf({{"f1", {}}, {"f2", {"f1"}}, {"add", {"f2"}}, {"g1", {"add"}}, {"add2", {"g1", "add"}}});
  EXPECT_EQ(decomposed(g), "S(f1 f2 add g1 add2)");
  EXPECT_TRUE(seriesParallel(g).linearised.empty());
}

TEST(SeriesParallel, APartThatIsNotSeriesParallelIsTakenAsAChainAndNamed) {
  // The bridge a -> b joins the two branches inside the fork-join.
  const auto g = graphOf({{"s", {}}, {"a", {"s"}}, {"b", {"s", "a"}}, {"c", {"a"}}, {"t", {"b", "c"}}});
  const SpTree t = seriesParallel(g);
  EXPECT_EQ(show(g, t, t.root), "S(s S(a b c) t)");
  ASSERT_EQ(t.linearised.size(), 1u);
  EXPECT_NE(t.linearised[0].find("'a' .. 'c' (3 layers) are not series-parallel"), std::string::npos) << t.linearised[0];
}

TEST(SeriesParallel, EveryLayerIsInExactlyOneLeaf) {
  const auto g = graphOf({{"fork", {}}, {"a", {"fork"}}, {"b", {"fork"}}, {"c", {"fork"}}, {"j", {"a", "b", "c"}},
                          {"k", {"j"}}, {"l", {"k", "j"}}});
  const SpTree t = seriesParallel(g);
  std::vector<int> seen(g.size(), 0);
  const std::function<void(int)> visit = [&](int v) {
    if (t.nodes[v].kind == SpNode::Kind::kLayer) ++seen[t.nodes[v].layer];
    for (int c : t.nodes[v].children) visit(c);
  };
  visit(t.root);
  EXPECT_EQ(seen, std::vector<int>(g.size(), 1));
  EXPECT_EQ(t.nodes[t.root].layers.size(), static_cast<std::size_t>(g.size()));
}

TEST(SeriesParallel, AParallelNodeAlsoOffersItsLayersByLevel) {
  const auto g = graphOf({{"a1", {}}, {"a2", {"a1"}}, {"b1", {}}, {"b2", {"b1"}}, {"j", {"a2", "b2"}}});
  const SpTree t = seriesParallel(g);
  const SpNode& branches = t.nodes[t.nodes[t.root].children[0]];
  ASSERT_EQ(branches.kind, SpNode::Kind::kParallel);
  ASSERT_GE(branches.by_level, 0);
  EXPECT_EQ(show(g, t, branches.by_level), "S(a1 b1 a2 b2)");
}

TEST(SeriesParallel, AParallelChildOffersItsLastBranchesJoinedToWhatFollows) {
  const auto g = graphOf({{"a1", {}}, {"a2", {"a1"}}, {"b1", {}}, {"b2", {"b1"}}, {"c1", {}}, {"j", {"a2", "b2", "c1"}},
                          {"h", {"j"}}});
  const SpTree t = seriesParallel(g);
  const SpNode& root = t.nodes[t.root];
  ASSERT_EQ(show(g, t, t.root), "S(P(S(a1 a2) S(b1 b2) c1) j h)");
  std::vector<std::string> joins;
  for (const SpNode::Join& join : root.joins) {
    EXPECT_EQ(join.child, 0);
    joins.push_back(std::to_string(join.apart) + ": " + show(g, t, join.series));
  }
  // One branch joins as its own layers, so that a stage may hold its tail and the join.
  EXPECT_EQ(joins, (std::vector<std::string>{"1: S(P(S(b1 b2) c1) j h)", "2: S(c1 j h)"}));
  for (const SpNode& n : t.nodes)
    if (&n != &root) EXPECT_TRUE(n.joins.empty());  // branches are chains: nothing to join
}

}  // namespace
}  // namespace pipetrain::graph
