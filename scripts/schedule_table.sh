#!/usr/bin/env bash
# The schedules side by side with equal stage costs (per rank and micro-batch F = 1,
# B = 2 of which W = 1; free communication): simulated iteration time, bubble and peak
# activations for every schedule at p=4, m=8 and p=8, m=32, as the markdown table in
# docs/schedules.md, and each schedule's Gantt chart at p=4, m=8 in docs/images/schedules/.
# Usage: scripts/schedule_table.sh [build-dir]
set -euo pipefail
build=${1:-build}
bin="$build/pipetrain"
mkdir -p docs/images/schedules
schedules=$("$bin" schedule --help | sed -n 's/.*--schedule TEXT=1f1b *//p' | tr -d ',')

echo "| schedule | p=4, m=8: iteration | bubble | peak activations | p=8, m=32: iteration | bubble | peak activations |"
echo "|---|---|---|---|---|---|---|"
# dualpipev twice: as priced by default (a pair takes F + B) and with a device that runs
# a pair in 75% of that (the graph's overlap_factor).
for s in $schedules dualpipev@0.75; do
  factor=()
  name=$s
  if [[ $s == *@* ]]; then name=${s%@*}; factor=(--overlap-factor "${s#*@}"); s=$name; fi
  row="| \`$s\`${factor[*]:+ (${factor[*]})}"
  for pm in "4 8" "8 32"; do
    set -- $pm
    extra=()
    [ "$s" = interleaved ] && extra=(--chunks 2)
    svg=()
    [ "$1" = 4 ] && [ ${#factor[@]} = 0 ] && svg=(--svg "docs/images/schedules/${s}_p4_m8.svg")
    out=$("$bin" simulate --schedule "$s" --stages "$1" --microbatches "$2" --uniform 1,2,1 "${extra[@]}" \
      "${svg[@]}" "${factor[@]}")
    # "iteration time 24 s, ..., mean bubble 0.0%", then one row per rank: peak activations in column 4
    iteration=$(sed -n 's/^iteration time \([^ ]*\) s.*/\1/p' <<<"$out")
    bubble=$(sed -n 's/.*mean bubble \([^%]*\)%.*/\1/p' <<<"$out")
    peak=$(awk '$1 ~ /^[0-9]+$/ && $4 > max { max = $4 } END { print max }' <<<"$out")
    row+=" | $iteration | $bubble% | $peak"
  done
  echo "$row |"
done
