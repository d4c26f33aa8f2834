# Sourced by the tests of the ecosystem's families (tests/ecosystem/families.py), after
# harness.sh, with $src, $bin and $python set.
capture=$src/python/pipetrain_capture.py
families=$src/tests/ecosystem/families.py

# family NAME DATA EXPRESSION: captures NAME from the command line, trains it on 2 and 3
# ranks under the planner's choice and exports; the exports are scored in the families'
# own classes after the last family. A model with batch norm also trains data parallel
# on 2 ranks ("2dp"): each replica updates its own running statistics, and the
# evaluation and the export must both take the first replica's.
family() {
  local name=$1 data=$2 expr=$3
  set -- 2 3
  [[ $expr == *resnet* ]] && set -- 2 3 2dp
  check "capture $name" "$python" "$capture" capture "$families:$expr" --data-file "$tmp/$data.pt" --out "$tmp/$name.pt"
  for run in "$@"; do
    local ranks=${run%dp}
    local how=(--batch 48)  # one batch on 2 and 3 ranks: the second run plans from the first's profile
    [[ $run == *dp ]] && how=(--data-parallel --microbatches 2 --microbatch-size 16)
    check "$name trains on $run ranks" "$bin" train --model-file "$tmp/$name.pt" --data-file "$tmp/$data.pt" \
      --nproc "$ranks" "${how[@]}" --epochs 1 --max-steps 4 --export "$tmp/$name-$run.pt" \
      --summary-json "$tmp/$name-$run.json"
    expect "$name on $run ranks exported" "exported the trained model to $tmp/$name-$run.pt"
  done
  for run in "$@"; do echo "$name $data $run"; done >>"$tmp/exports.txt"
}
