// LayerGraph: JSON form, defaults and shorthands, validation messages, topological order.
#include "pipetrain/graph/layer_graph.h"

#include <gtest/gtest.h>

#include "../expect_error.h"

namespace pipetrain::graph {
namespace {

using json_io::Json;

// Runs `f`, which must throw Error, and checks that the message names every key word.
using testing::expectError;

Json layerJson(const std::string& name) {
  return Json{{"name", name},
              {"forward_seconds", 1.0},
              {"backward_input_seconds", 1.0},
              {"backward_weight_seconds", 0.5},
              {"output_bytes", 100},
              {"param_bytes", 10}};
}

Json graphJson(std::vector<Json> layers) {
  return Json{{"format", "pipetrain.layer_graph"}, {"version", 1}, {"batch_size", 4}, {"layers", layers}};
}

Json withInputs(Json layer, std::vector<std::string> inputs) {
  layer["inputs"] = inputs;
  return layer;
}

TEST(LayerGraph, ChainShorthandAndDefaults) {
  const LayerGraph g = LayerGraph::fromJson(graphJson({layerJson("a"), layerJson("b"), layerJson("c")}), "g.json");
  ASSERT_EQ(g.size(), 3);
  EXPECT_EQ(g.batchSize(), 4);
  EXPECT_TRUE(g.layer(0).inputs.empty());
  EXPECT_EQ(g.layer(1).inputs, std::vector<std::string>{"a"});
  EXPECT_EQ(g.layer(2).inputs, std::vector<std::string>{"b"});
  EXPECT_TRUE(g.isChain());
  EXPECT_EQ(g.layer(0).kind, "layer");
  EXPECT_EQ(g.layer(0).saved_activation_bytes, 100);  // defaults to output_bytes
  EXPECT_EQ(g.layer(0).optimizer_state_bytes, 20);    // Adam: 2 x param_bytes
  EXPECT_DOUBLE_EQ(g.layer(0).backwardSeconds(), 1.5);
}

TEST(LayerGraph, BackwardSecondsIsSplitByWhetherTheLayerHasWeights) {
  Json with_params = layerJson("a"), no_params = layerJson("b");
  for (Json* l : {&with_params, &no_params}) {
    l->erase("backward_input_seconds");
    l->erase("backward_weight_seconds");
    (*l)["backward_seconds"] = 3.0;
  }
  no_params["param_bytes"] = 0;
  const LayerGraph g = LayerGraph::fromJson(graphJson({with_params, no_params}), "g.json");
  EXPECT_DOUBLE_EQ(g.layer(0).backward_input_seconds, 1.5);
  EXPECT_DOUBLE_EQ(g.layer(0).backward_weight_seconds, 1.5);
  EXPECT_DOUBLE_EQ(g.layer(1).backward_input_seconds, 3.0);
  EXPECT_DOUBLE_EQ(g.layer(1).backward_weight_seconds, 0.0);
}

TEST(LayerGraph, BackwardFormsAreExclusiveAndOneIsRequired) {
  Json both = layerJson("a");
  both["backward_seconds"] = 2.0;
  expectError([&] { LayerGraph::fromJson(graphJson({both}), "g.json"); }, {"g.json", "layers[0]", "not both"});
  Json none = layerJson("a");
  none.erase("backward_weight_seconds");
  expectError([&] { LayerGraph::fromJson(graphJson({none}), "g.json"); }, {"g.json", "backward_weight_seconds"});
}

TEST(LayerGraph, JsonRoundTripIsExplicitAndLossless) {
  Json l = layerJson("b");
  l["kind"] = "conv";
  l["saved_activation_bytes"] = 7;
  l["optimizer_state_bytes"] = 0;
  const LayerGraph g = LayerGraph::fromJson(graphJson({layerJson("a"), l}), "g.json");
  const Json written = g.toJson();
  EXPECT_EQ(written["layers"][1]["inputs"], Json::array({"a"}));
  EXPECT_EQ(written["layers"][0]["inputs"], Json::array());
  const LayerGraph back = LayerGraph::fromJson(written, "written");
  EXPECT_EQ(back.toJson(), written);
  EXPECT_EQ(back.layer(1).kind, "conv");
  EXPECT_EQ(back.layer(1).saved_activation_bytes, 7);
  EXPECT_EQ(back.layer(1).optimizer_state_bytes, 0);
}

TEST(LayerGraph, OptimizerSecondsAreOptional) {
  Json stepped = layerJson("b");
  stepped["optimizer_seconds"] = 0.25;
  const LayerGraph g = LayerGraph::fromJson(graphJson({layerJson("a"), stepped}), "g.json");
  EXPECT_EQ(g.layer(0).optimizer_seconds, 0.0);
  EXPECT_EQ(g.layer(1).optimizer_seconds, 0.25);
  const Json written = g.toJson();
  EXPECT_FALSE(written["layers"][0].contains("optimizer_seconds"));
  EXPECT_EQ(LayerGraph::fromJson(written, "written").layer(1).optimizer_seconds, 0.25);
}

TEST(LayerGraph, WeightVersionSecondsAreOptionalAndRoundTrip) {
  Json copied = layerJson("b");
  copied["weight_swap_seconds"] = 0.5;
  copied["weight_stash_seconds"] = 0.25;
  copied["weight_correction_seconds"] = 0.125;
  const LayerGraph g = LayerGraph::fromJson(graphJson({layerJson("a"), copied}), "g.json");
  EXPECT_EQ(g.layer(0).weight_versions.swap, 0.0);  // older files: not measured, not priced
  EXPECT_EQ(g.layer(1).weight_versions.swap, 0.5);
  EXPECT_EQ(g.layer(1).weight_versions.stash, 0.25);
  EXPECT_EQ(g.layer(1).weight_versions.correction, 0.125);
  const Json written = g.toJson();
  EXPECT_FALSE(written["layers"][0].contains("weight_swap_seconds"));
  EXPECT_EQ(LayerGraph::fromJson(written, "written").toJson(), written);
  Json bad = copied;
  bad["weight_stash_seconds"] = -1;
  expectError([&] { LayerGraph::fromJson(graphJson({bad}), "g.json"); }, {"g.json", "layers[0].weight_stash_seconds"});
}

TEST(LayerGraph, PeakMemoryIsOptionalAndWrittenOnlyWhenMeasured) {
  Json measured = layerJson("b");
  measured["peak_memory_bytes"] = 4096;
  measured["split_peak_memory_bytes"] = 5120;
  measured["weight_peak_memory_bytes"] = 2048;
  const LayerGraph g = LayerGraph::fromJson(graphJson({layerJson("a"), measured}), "g.json");
  EXPECT_EQ(g.layer(0).peak_memory_bytes, -1);  // older files: not measured
  EXPECT_EQ(g.layer(0).split_peak_memory_bytes, -1);
  EXPECT_EQ(g.layer(1).peak_memory_bytes, 4096);
  EXPECT_EQ(g.layer(1).split_peak_memory_bytes, 5120);
  EXPECT_EQ(g.layer(1).weight_peak_memory_bytes, 2048);
  EXPECT_EQ(g.layer(0).weight_peak_memory_bytes, -1);
  const Json written = g.toJson();
  EXPECT_FALSE(written["layers"][0].contains("peak_memory_bytes"));
  EXPECT_FALSE(written["layers"][0].contains("split_peak_memory_bytes"));
  EXPECT_EQ(written["layers"][1]["peak_memory_bytes"], 4096);
  EXPECT_EQ(written["layers"][1]["split_peak_memory_bytes"], 5120);
  EXPECT_EQ(written["layers"][1]["weight_peak_memory_bytes"], 2048);
  EXPECT_FALSE(written["layers"][0].contains("weight_peak_memory_bytes"));
  EXPECT_EQ(LayerGraph::fromJson(written, "written").toJson(), written);
  for (const char* field : {"peak_memory_bytes", "split_peak_memory_bytes", "weight_peak_memory_bytes"}) {
    Json bad = measured;
    bad[field] = -5;
    expectError([&] { LayerGraph::fromJson(graphJson({bad}), "g.json"); },
                {"g.json", std::string("layers[0].") + field});
  }
}

TEST(LayerGraph, WhatAProcessHoldsBesideItsTensorsIsOptionalAndRoundTrips) {
  Json j = graphJson({layerJson("a"), layerJson("b")});
  const LayerGraph plain = LayerGraph::fromJson(j, "g.json");
  EXPECT_TRUE(plain.processMemory().empty());
  EXPECT_FALSE(plain.toJson().contains("process_memory"));  // older files stay as they were
  j["process_memory"] = {{"data_bytes", 48e6}, {"framework_bytes", 3 << 20}, {"runs", 2}, {"heap", "tcmalloc"}};
  const LayerGraph g = LayerGraph::fromJson(j, "g.json");
  EXPECT_EQ(g.processMemory().data_bytes, 48000000);
  EXPECT_EQ(g.processMemory().framework_bytes, 3 << 20);
  EXPECT_EQ(g.processMemory().runs, 2);
  EXPECT_EQ(g.processMemory().heap, "tcmalloc");
  EXPECT_EQ(LayerGraph::fromJson(g.toJson(), "written").toJson(), g.toJson());
  EXPECT_EQ(g.withOtherBatches({}, "same").processMemory().framework_bytes, 3 << 20);
  j["process_memory"]["framework_bytes"] = -1;
  expectError([&] { LayerGraph::fromJson(j, "g.json"); }, {"g.json", "process_memory.framework_bytes"});
  j["process_memory"] = {{"dataset_bytes", 1}};
  expectError([&] { LayerGraph::fromJson(j, "g.json"); }, {"g.json", "dataset_bytes"});
}

TEST(LayerGraph, TheLearnedActionOverheadIsOptionalAndRoundTrips) {
  Json j = graphJson({layerJson("a")});
  EXPECT_EQ(LayerGraph::fromJson(j, "g.json").actionOverhead().runs, 0);  // none learned
  EXPECT_FALSE(LayerGraph::fromJson(j, "g.json").toJson().contains("action_overhead"));
  j["action_overhead"] = {{"seconds", 5e-6}, {"runs", 2}};
  const LayerGraph g = LayerGraph::fromJson(j, "g.json");
  EXPECT_EQ(g.actionOverhead().seconds, 5e-6);
  EXPECT_EQ(g.actionOverhead().runs, 2);
  EXPECT_EQ(LayerGraph::fromJson(g.toJson(), "written").toJson(), g.toJson());
  // Kept where the graph gains other sizes.
  EXPECT_EQ(g.withOtherBatches({}, "p").actionOverhead().runs, 2);
  j["action_overhead"]["seconds"] = -1;
  expectError([&] { LayerGraph::fromJson(j, "g.json"); }, {"g.json", "action_overhead.seconds"});
  j["action_overhead"] = {{"seconds", 5e-6}};
  expectError([&] { LayerGraph::fromJson(j, "g.json"); }, {"g.json", "runs"});
}

TEST(LayerGraph, TheBackwardCallIsOptionalAndRoundTrips) {
  Json j = graphJson({layerJson("a")});
  EXPECT_EQ(LayerGraph::fromJson(j, "g.json").backwardCallSeconds(), 0);  // not measured
  EXPECT_FALSE(LayerGraph::fromJson(j, "g.json").toJson().contains("backward_call_seconds"));
  j["backward_call_seconds"] = 4e-6;
  const LayerGraph g = LayerGraph::fromJson(j, "g.json");
  EXPECT_EQ(g.backwardCallSeconds(), 4e-6);
  EXPECT_EQ(LayerGraph::fromJson(g.toJson(), "written").toJson(), g.toJson());
  // Kept where the graph gains other sizes or other layers' figures.
  EXPECT_EQ(g.withOtherBatches({}, "p").backwardCallSeconds(), 4e-6);
  EXPECT_EQ(g.withLayers(g.layers(), "p").backwardCallSeconds(), 4e-6);
  j["backward_call_seconds"] = -1;
  expectError([&] { LayerGraph::fromJson(j, "g.json"); }, {"g.json", "backward_call_seconds"});
  j["backward_call_seconds"] = 0.5;  // half a second a call: a mistake
  expectError([&] { LayerGraph::fromJson(j, "g.json"); }, {"g.json", "backward_call_seconds", "between 0 and"});
}

TEST(LayerGraph, HowAProfileWasTakenIsOptionalAndRoundTrips) {
  Json j = graphJson({layerJson("a")});
  EXPECT_EQ(LayerGraph::fromJson(j, "g.json").profiledAs().threads, 0);
  j["profiled_as"] = {{"threads", 2}, {"shares", 1}, {"probe_seconds", 0.001}};
  EXPECT_EQ(LayerGraph::fromJson(j, "g.json").profiledAs().thread_speedup, 0);  // not measured
  EXPECT_FALSE(LayerGraph::fromJson(j, "g.json").toJson()["profiled_as"].contains("thread_speedup"));
  j["profiled_as"]["thread_speedup"] = 1.9;
  const LayerGraph g = LayerGraph::fromJson(j, "g.json");
  EXPECT_EQ(g.profiledAs().threads, 2);
  EXPECT_EQ(g.profiledAs().shares, 1);
  EXPECT_EQ(g.profiledAs().probe_seconds, 0.001);
  EXPECT_EQ(g.profiledAs().thread_speedup, 1.9);
  EXPECT_EQ(LayerGraph::fromJson(g.toJson(), "written").toJson(), g.toJson());
  j["profiled_as"]["probe_seconds"] = -1;
  expectError([&] { LayerGraph::fromJson(j, "g.json"); }, {"g.json", "probe_seconds"});
  j["profiled_as"]["probe_seconds"] = 0.001;
  j["profiled_as"]["thread_speedup"] = 0;
  expectError([&] { LayerGraph::fromJson(j, "g.json"); }, {"g.json", "thread_speedup"});
  j["profiled_as"]["thread_speedup"] = 1.9;
  j["profiled_as"]["threads"] = -2;
  expectError([&] { LayerGraph::fromJson(j, "g.json"); }, {"g.json", "profiled_as"});
}

TEST(LayerGraph, SplitWeightSecondsDefaultToTheWeightPass) {
  Json measured = layerJson("b");
  measured["split_weight_seconds"] = 0.75;
  const LayerGraph g = LayerGraph::fromJson(graphJson({layerJson("a"), measured}), "g.json");
  EXPECT_EQ(g.layer(0).splitWeightSeconds(), g.layer(0).backward_weight_seconds);  // older files
  EXPECT_EQ(g.layer(1).splitWeightSeconds(), 0.75);
  const Json written = g.toJson();
  EXPECT_FALSE(written["layers"][0].contains("split_weight_seconds"));
  EXPECT_EQ(LayerGraph::fromJson(written, "written").toJson(), written);
  measured["split_weight_seconds"] = -1;
  expectError([&] { LayerGraph::fromJson(graphJson({measured}), "g.json"); },
              {"g.json", "layers[0].split_weight_seconds"});
}

TEST(LayerGraph, ForwardWithoutAGraphDefaultsToTheForwardPass) {
  Json measured = layerJson("b");
  measured["forward_no_grad_seconds"] = 0.25;
  measured["other_batches"] = Json::parse(R"([
    {"batch": 8, "forward_seconds": 1.6, "backward_input_seconds": 1.5, "backward_weight_seconds": 0.8,
     "forward_no_grad_seconds": 0.5},
    {"batch": 16, "forward_seconds": 2.5, "backward_input_seconds": 2.0, "backward_weight_seconds": 1.0}])");
  const LayerGraph g = LayerGraph::fromJson(graphJson({layerJson("a"), measured}), "g.json");
  EXPECT_EQ(g.layer(0).forwardNoGradSeconds(), g.layer(0).forward_seconds);  // older files
  EXPECT_DOUBLE_EQ(g.secondsAt(0, 8).forward_no_grad, g.secondsAt(0, 8).forward);
  EXPECT_EQ(g.layer(1).forwardNoGradSeconds(), 0.25);
  EXPECT_DOUBLE_EQ(g.secondsAt(1, 4).forward_no_grad, 0.25);
  EXPECT_DOUBLE_EQ(g.secondsAt(1, 6).forward_no_grad, (0.25 + 0.5) / 2);
  EXPECT_DOUBLE_EQ(g.secondsAt(1, 12).forward_no_grad, (0.5 + 2.5) / 2);  // given at 8, the forward pass at 16
  const Json written = g.toJson();
  EXPECT_FALSE(written["layers"][0].contains("forward_no_grad_seconds"));
  EXPECT_EQ(LayerGraph::fromJson(written, "written").toJson(), written);
  measured["forward_no_grad_seconds"] = -1;
  expectError([&] { LayerGraph::fromJson(graphJson({measured}), "g.json"); },
              {"g.json", "layers[0].forward_no_grad_seconds"});
}

TEST(LayerGraph, TimesAboveTheLargestStayBetweenItsAndTheProportions) {
  // Timed at 4 (the graph's batch), 8 and 16: F grows faster than in proportion from 8 to
  // 16, I shrinks (noise), W grows by a part fixed per pass.
  Json layer = layerJson("a");
  layer["other_batches"] = Json::parse(R"([
    {"batch": 8, "forward_seconds": 1.0, "backward_input_seconds": 2.0, "backward_weight_seconds": 0.6},
    {"batch": 16, "forward_seconds": 3.0, "backward_input_seconds": 1.5, "backward_weight_seconds": 1.0}])");
  const LayerGraph g = LayerGraph::fromJson(graphJson({layer}), "g.json");
  EXPECT_DOUBLE_EQ(g.secondsAt(0, 32).forward, 6.0);          // the line gives 7: in proportion at most
  EXPECT_DOUBLE_EQ(g.secondsAt(0, 32).backward_input, 1.5);   // the line gives 0.5: the largest's at least
  EXPECT_DOUBLE_EQ(g.secondsAt(0, 32).backward_weight, 1.8);  // the line: 1.0 + 0.05 s a sample
  EXPECT_DOUBLE_EQ(g.secondsAt(0, 24).backward_weight, 1.4);
  // The graph's own batch is the second largest where the others lie below it.
  Json below = layerJson("b");
  below["other_batches"] = Json::parse(R"([{"batch": 2, "forward_seconds": 0.8,
    "backward_input_seconds": 0.5, "backward_weight_seconds": 0.25}])");
  const LayerGraph h = LayerGraph::fromJson(graphJson({below}), "h.json");
  EXPECT_DOUBLE_EQ(h.secondsAt(0, 8).forward, 1.0 + 4 * 0.1);
}

TEST(LayerGraph, SplitActivationBytesDefaultToTheSavedActivations) {
  Json measured = layerJson("b");
  measured["split_activation_bytes"] = 1234;
  const LayerGraph g = LayerGraph::fromJson(graphJson({layerJson("a"), measured}), "g.json");
  EXPECT_EQ(g.layer(0).splitActivationBytes(), g.layer(0).saved_activation_bytes);  // older files
  EXPECT_EQ(g.layer(1).splitActivationBytes(), 1234);
  const Json written = g.toJson();
  EXPECT_FALSE(written["layers"][0].contains("split_activation_bytes"));
  EXPECT_EQ(LayerGraph::fromJson(written, "written").toJson(), written);
  measured["split_activation_bytes"] = -5;
  expectError([&] { LayerGraph::fromJson(graphJson({measured}), "g.json"); },
              {"g.json", "layers[0].split_activation_bytes"});
}

TEST(LayerGraph, TimesAtOtherBatchesInterpolateBetweenAndScaleBeyond) {
  // Timed at 4 (the graph's batch: F 1 s) and at 16 (F 2.5 s) and 8 (F 1.6 s), listed
  // out of order.
  Json layer = layerJson("a");
  layer["other_batches"] = Json::parse(R"([
    {"batch": 16, "forward_seconds": 2.5, "backward_input_seconds": 2.0, "backward_weight_seconds": 1.0},
    {"batch": 8, "forward_seconds": 1.6, "backward_input_seconds": 1.5, "backward_weight_seconds": 0.8,
     "split_weight_seconds": 0.9}])");
  const LayerGraph g = LayerGraph::fromJson(graphJson({layer, layerJson("b")}), "g.json");
  EXPECT_DOUBLE_EQ(g.secondsAt(0, 4).forward, 1.0);
  EXPECT_DOUBLE_EQ(g.secondsAt(0, 8).forward, 1.6);
  EXPECT_DOUBLE_EQ(g.secondsAt(0, 6).forward, 1.3);                   // halfway between 4 and 8
  EXPECT_DOUBLE_EQ(g.secondsAt(0, 12).backward_input, 1.75);          // halfway between 8 and 16
  EXPECT_DOUBLE_EQ(g.secondsAt(0, 12).split_weight, (0.9 + 1.0) / 2);  // given at 8, the W pass at 16
  EXPECT_DOUBLE_EQ(g.secondsAt(0, 2).forward, 0.5);                   // in proportion below the smallest
  // Above the largest, the line through 8 and 16 carried on (F: 0.9 s more per 8 samples).
  EXPECT_DOUBLE_EQ(g.secondsAt(0, 32).forward, 2.5 + 2 * 0.9);
  EXPECT_DOUBLE_EQ(g.secondsAt(0, 32).backward_weight, 1.0 + 2 * 0.2);
  // A layer timed at the graph's batch only scales in proportion, as graphs always did.
  EXPECT_DOUBLE_EQ(g.secondsAt(1, 12).forward, 3.0);
  EXPECT_DOUBLE_EQ(g.secondsAt(1, 12).split_weight, 1.5);
  const Json written = g.toJson();
  EXPECT_EQ(written["layers"][0]["other_batches"][0]["batch"], 8);  // smallest first
  EXPECT_FALSE(written["layers"][1].contains("other_batches"));
  EXPECT_EQ(LayerGraph::fromJson(written, "written").toJson(), written);

  layer["other_batches"][0]["batch"] = 4;
  expectError([&] { LayerGraph::fromJson(graphJson({layer}), "g.json"); }, {"g.json", "'a'", "batch_size"});
  layer["other_batches"][0]["batch"] = 8;
  expectError([&] { LayerGraph::fromJson(graphJson({layer}), "g.json"); }, {"g.json", "'a'", "batch 8 twice"});
  layer["other_batches"][0]["batch"] = 0;
  expectError([&] { LayerGraph::fromJson(graphJson({layer}), "g.json"); }, {"g.json", "other_batches[0].batch"});
  layer["other_batches"][0] = Json{{"batch", 16}, {"forward_seconds", -1}, {"backward_input_seconds", 1},
                                   {"backward_weight_seconds", 1}};
  expectError([&] { LayerGraph::fromJson(graphJson({layer}), "g.json"); },
              {"g.json", "other_batches[0].forward_seconds"});
}

TEST(LayerGraph, ProfilesAtOtherBatchesBecomeOtherBatches) {
  const LayerGraph at4 = LayerGraph::uniformChain(3, 1, 2, 3), at16 = LayerGraph(at4.layers(), 16);
  const LayerGraph both = at4.withOtherBatches({at16}, "profile");
  ASSERT_EQ(both.layer(2).other_batches.size(), 1u);
  EXPECT_EQ(both.layer(2).other_batches[0].batch, 16);
  EXPECT_DOUBLE_EQ(both.secondsAt(2, 16).backward_weight, 3);  // as timed at 16, not 4 x 3
  expectError([&] { both.withOtherBatches({at16}, "profile"); }, {"profile", "batch 16 twice"});
  expectError([&] { at4.withOtherBatches({LayerGraph::uniformChain(2, 1, 1, 1)}, "profile"); },
              {"profile", "batch 1", "2 layers, not 3"});
}

// The optimizer step is taken as timed after the largest size's passes, whose working
// set is nearer a training step's; a smaller size given after the graph's changes nothing.
TEST(LayerGraph, TheOptimizerStepIsTheOneTimedAfterTheLargestSize) {
  std::vector<Layer> at4 = LayerGraph::uniformChain(2, 1, 1, 1).layers(), at16 = at4, at2 = at4;
  for (Layer& l : at4) l.optimizer_seconds = 0.003;
  for (Layer& l : at16) l.optimizer_seconds = l.weight_versions.swap = 0.005;
  for (Layer& l : at2) l.optimizer_seconds = 0.002;
  const LayerGraph graph(at4, 4);
  EXPECT_DOUBLE_EQ(graph.withOtherBatches({LayerGraph(at16, 16), LayerGraph(at2, 2)}, "p").layer(1).optimizer_seconds,
                   0.005);
  // So are the copies of weight versions, timed after the optimizer steps.
  EXPECT_DOUBLE_EQ(graph.withOtherBatches({LayerGraph(at16, 16)}, "p").layer(1).weight_versions.swap, 0.005);
  EXPECT_DOUBLE_EQ(graph.withOtherBatches({LayerGraph(at2, 2)}, "p").layer(1).optimizer_seconds, 0.003);
}

// What every micro-batch keeps whatever its size (autocast's weight copies) is where the
// saved bytes at two sizes meet batch 0; priced once per micro-batch, not in proportion.
TEST(LayerGraph, SavedBytesFixedPerMicrobatchFromTwoSizes) {
  std::vector<Layer> layers = LayerGraph::uniformChain(2, 1, 1, 1).layers();
  layers[0].saved_activation_bytes = 100 + 4 * 10;  // 100 fixed, 10 per sample
  layers[1].saved_activation_bytes = 4 * 10;
  std::vector<Layer> big = layers;
  big[0].saved_activation_bytes = 100 + 16 * 10;
  big[1].saved_activation_bytes = 16 * 10 + 8;  // rounding tilts the line below 0: none fixed
  const LayerGraph both = LayerGraph(layers, 4).withOtherBatches({LayerGraph(big, 16)}, "profile");
  EXPECT_EQ(both.layer(0).saved_fixed_bytes, 100);
  EXPECT_EQ(both.layer(1).saved_fixed_bytes, 0);
  EXPECT_DOUBLE_EQ(both.layer(0).savedBytesAt(4.0), 100 + 16 * 10);
  const LayerGraph again = LayerGraph::fromJson(both.toJson(), "round trip");
  EXPECT_EQ(again.layer(0).saved_fixed_bytes, 100);
  json_io::Json j = both.toJson();
  j["layers"][0]["saved_fixed_bytes"] = 1000;
  expectError([&] { LayerGraph::fromJson(j, "g.json"); }, {"g.json", "saved_fixed_bytes", "more than"});
}

TEST(LayerGraph, SortsTopologicallyKeepingTheGivenOrderWherePossible) {
  // Listed: a, c, b, d with c reading b; the only move needed is b before c.
  const LayerGraph g = LayerGraph::fromJson(
      graphJson({withInputs(layerJson("a"), {}), withInputs(layerJson("c"), {"b"}), withInputs(layerJson("b"), {"a"}),
                 withInputs(layerJson("d"), {"a"})}),
      "g.json");
  std::vector<std::string> order;
  for (const Layer& l : g.layers()) order.push_back(l.name);
  EXPECT_EQ(order, (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_EQ(g.indexOf("c"), 2);
  EXPECT_EQ(g.indexOf("nope"), -1);
  EXPECT_EQ(g.successors(0), (std::vector<int>{1, 3}));
  EXPECT_EQ(g.predecessors(2), std::vector<int>{1});
  EXPECT_FALSE(g.isChain());
}

TEST(LayerGraph, BranchesAndMerges) {
  const LayerGraph g = LayerGraph::fromJson(
      graphJson({layerJson("in"), withInputs(layerJson("l"), {"in"}), withInputs(layerJson("r"), {"in"}),
                 withInputs(layerJson("join"), {"l", "r"})}),
      "g.json");
  EXPECT_EQ(g.predecessors(3), (std::vector<int>{1, 2}));
  EXPECT_EQ(g.successors(0), (std::vector<int>{1, 2}));
  EXPECT_FALSE(g.isChain());
}

TEST(LayerGraph, RejectsCyclesNamingALayerOnTheCycle) {
  expectError(
      [] {
        LayerGraph::fromJson(graphJson({withInputs(layerJson("x"), {}), withInputs(layerJson("a"), {"c"}),
                                        withInputs(layerJson("b"), {"a"}), withInputs(layerJson("c"), {"b"})}),
                             "g.json");
      },
      {"g.json", "cycle", "'a' -> 'b' -> 'c' -> 'a'"});
  expectError([] { LayerGraph::fromJson(graphJson({withInputs(layerJson("s"), {"s"})}), "g.json"); },
              {"g.json", "cycle", "'s'"});
}

TEST(LayerGraph, RejectsBadNamesAndInputs) {
  expectError([] { LayerGraph::fromJson(graphJson({layerJson("a"), withInputs(layerJson("b"), {"zz"})}), "g.json"); },
              {"g.json", "'b'", "'zz'"});
  expectError([] { LayerGraph::fromJson(graphJson({layerJson("a"), layerJson("a")}), "g.json"); },
              {"g.json", "'a'", "twice"});
  expectError([] { LayerGraph::fromJson(graphJson({layerJson("")}), "g.json"); }, {"g.json", "empty name"});
  expectError([] { LayerGraph::fromJson(graphJson({}), "g.json"); }, {"g.json", "no layers"});
  expectError(
      [] { LayerGraph::fromJson(graphJson({layerJson("a"), withInputs(layerJson("b"), {"a", "a"})}), "g.json"); },
      {"g.json", "'b'", "'a'", "twice"});
}

TEST(LayerGraph, RejectsWrongHeaderTyposAndBadNumbers) {
  Json j = graphJson({layerJson("a")});
  j["version"] = 2;
  expectError([&] { LayerGraph::fromJson(j, "g.json"); }, {"g.json", "version 2"});
  j = graphJson({layerJson("a")});
  j["format"] = "pipetrain.plan";
  expectError([&] { LayerGraph::fromJson(j, "g.json"); }, {"g.json", "pipetrain.layer_graph"});
  j = graphJson({layerJson("a")});
  j["layers"][0]["forward_second"] = 1.0;
  expectError([&] { LayerGraph::fromJson(j, "g.json"); }, {"g.json", "layers[0]", "forward_second"});
  j = graphJson({layerJson("a")});
  j["batch_size"] = 0;
  expectError([&] { LayerGraph::fromJson(j, "g.json"); }, {"g.json", "batch_size"});
  j = graphJson({layerJson("a")});
  j["layers"][0]["output_bytes"] = -1;
  expectError([&] { LayerGraph::fromJson(j, "g.json"); }, {"g.json", "layers[0].output_bytes"});
}

TEST(LayerGraph, UniformChain) {
  const LayerGraph g = LayerGraph::uniformChain(3, 1.0, 2.0, 0.5, 64, 8);
  ASSERT_EQ(g.size(), 3);
  EXPECT_TRUE(g.isChain());
  EXPECT_EQ(g.layer(2).name, "layer2");
  EXPECT_DOUBLE_EQ(g.layer(1).backwardSeconds(), 2.5);
  EXPECT_EQ(g.layer(1).saved_activation_bytes, 64);
  EXPECT_EQ(g.layer(1).optimizer_state_bytes, 16);
  EXPECT_THROW(LayerGraph::uniformChain(0, 1, 1, 1), Error);
}

}  // namespace
}  // namespace pipetrain::graph
