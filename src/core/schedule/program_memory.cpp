#include "pipetrain/schedule/program_memory.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace pipetrain::schedule {
namespace {

// Last position on `rank` at which each (stage, version) is read.
std::map<std::pair<int, int>, int> lastReads(const std::vector<Action>& actions) {
  std::map<std::pair<int, int>, int> last;
  for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
    const Action& a = actions[i];
    if (isCompute(a.type)) last[{a.stage, a.version}] = i;
  }
  return last;
}

}  // namespace

std::vector<std::vector<Retirement>> retirements(const Program& program) {
  std::vector<std::vector<Retirement>> out(program.numRanks());
  for (int r = 0; r < program.numRanks(); ++r) {
    const auto& actions = program.ranks[r];
    auto last = lastReads(actions);
    // A version is retired at the later of its last read and the STEP that replaces it.
    std::map<std::pair<int, int>, int> replaced;
    for (int i = 0; i < static_cast<int>(actions.size()); ++i)
      if (actions[i].type == ActionType::STEP) replaced[{actions[i].stage, actions[i].version - 1}] = i;
    for (const auto& [key, step_pos] : replaced) {
      auto it = last.find(key);
      const int pos = std::max(step_pos, it == last.end() ? -1 : it->second);
      out[r].push_back({pos, key.first, key.second});
    }
    std::sort(out[r].begin(), out[r].end(),
              [](const Retirement& a, const Retirement& b) { return a.position < b.position; });
  }
  return out;
}

std::vector<RankFootprint> accountMemory(const Program& program, const std::vector<StageBytes>& stage_bytes) {
  auto bytesOf = [&](int stage) { return stage_bytes.empty() ? 0.0 : stage_bytes[stage].activations; };
  auto splitBytesOf = [&](int stage) {
    return stage_bytes.empty() ? 0.0 : stage_bytes[stage].split_activations.value_or(bytesOf(stage));
  };
  std::vector<RankFootprint> out(program.numRanks());
  const auto retired = retirements(program);
  for (int r = 0; r < program.numRanks(); ++r) {
    const auto& actions = program.ranks[r];
    const std::vector<int> stages = program.stagesOfRank(r);
    const double share = stages.empty() ? 0.0 : 1.0 / stages.size();
    // Per stage of the rank, by its place in `stages` (sorted; a rank holds few).
    auto local = [&](int stage) {
      return static_cast<std::size_t>(std::lower_bound(stages.begin(), stages.end(), stage) - stages.begin());
    };
    std::vector<StageFootprint> per_stage;
    for (int s : stages) per_stage.push_back(StageFootprint{s, 0, 1});
    std::vector<int> in_flight(stages.size(), 0), live_versions(stages.size(), 1);  // version 0 exists from the start
    // A split backward keeps activations until W; a whole one until B.
    std::set<std::pair<int, int>> has_weight_pass;
    for (const Action& a : actions)
      if (a.type == ActionType::W) has_weight_pass.insert({a.stage, a.microbatch});
    auto splitHere = [&](const Action& a) {
      return !has_weight_pass.empty() && has_weight_pass.count({a.stage, a.microbatch}) > 0;
    };

    int total_in_flight = 0;
    double peak = 0, bytes = 0, peak_bytes = 0;
    // The bytes peak inside a backward pass, by its transient tensors.
    auto passPeaks = [&](double StageBytes::*transient, int stage) {
      if (!stage_bytes.empty()) peak_bytes = std::max(peak_bytes, bytes + stage_bytes[stage].*transient);
    };
    std::vector<char> gradients_live(program.num_stages, 0);  // by stage: its gradients are allocated
    // A backward pass that computes weight gradients ends with them allocated.
    auto gradientsComputed = [&](int stage) {
      if (stage_bytes.empty() || std::exchange(gradients_live[stage], 1)) return;
      bytes += stage_bytes[stage].gradients;
      peak_bytes = std::max(peak_bytes, bytes);
    };
    std::size_t next_retirement = 0;
    auto retireUpTo = [&](int position) {
      for (; next_retirement < retired[r].size() && retired[r][next_retirement].position <= position; ++next_retirement)
        --live_versions[local(retired[r][next_retirement].stage)];
    };
    for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
      const Action& a = actions[i];
      // A STEP whose old version has no later reader updates in place: retire first.
      if (a.type == ActionType::STEP) retireUpTo(i);
      if (a.type == ActionType::F) {
        const std::size_t k = local(a.stage);
        ++in_flight[k];
        ++total_in_flight;
        per_stage[k].peak_activations = std::max(per_stage[k].peak_activations, in_flight[k]);
        peak = std::max(peak, total_in_flight * share);
        bytes += bytesOf(a.stage);
        peak_bytes = std::max(peak_bytes, bytes);
      } else if (a.type == ActionType::B && !splitHere(a)) {
        passPeaks(&StageBytes::backward_peak, a.stage);
        --in_flight[local(a.stage)];
        --total_in_flight;
        bytes -= bytesOf(a.stage);
        gradientsComputed(a.stage);
      } else if (a.type == ActionType::I && splitHere(a)) {
        passPeaks(&StageBytes::input_backward_peak, a.stage);
        bytes += splitBytesOf(a.stage) - bytesOf(a.stage);  // the gradients kept for W, less what only I read
        peak_bytes = std::max(peak_bytes, bytes);
      } else if (a.type == ActionType::W) {
        passPeaks(&StageBytes::weight_peak, a.stage);
        --in_flight[local(a.stage)];
        --total_in_flight;
        bytes -= splitBytesOf(a.stage);
        gradientsComputed(a.stage);
      } else if (a.type == ActionType::STEP) {
        if (std::exchange(gradients_live[a.stage], 0)) bytes -= stage_bytes[a.stage].gradients;
        const std::size_t k = local(a.stage);
        per_stage[k].weight_versions = std::max(per_stage[k].weight_versions, ++live_versions[k]);
      }
      retireUpTo(i);
    }
    RankFootprint& fp = out[r];
    fp.peak_activations = peak;
    fp.peak_activation_bytes = peak_bytes;
    for (const StageFootprint& stage_fp : per_stage) fp.weight_versions = std::max(fp.weight_versions, stage_fp.weight_versions);
    fp.stages = std::move(per_stage);
  }
  return out;
}

}  // namespace pipetrain::schedule
