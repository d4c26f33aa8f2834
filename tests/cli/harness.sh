# Sourced by the CLI tests: a scratch folder, counters and the three checks.
# Usage: . harness.sh; the checks; then `finish NAME` as the last line.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Each script's profiles are its own, never the user's cache (run_profile.h).
export PIPETRAIN_CACHE_DIR="$tmp/profile-cache"
passed=0 failed=0

check() {  # check NAME COMMAND...: the command must succeed; its stdout is kept in $tmp/out
  local name=$1; shift
  local started=$SECONDS
  if "$@" >"$tmp/out" 2>"$tmp/err"; then passed=$((passed + 1)); else
    failed=$((failed + 1)); echo "FAIL: $name"; cat "$tmp/out" "$tmp/err" | tail -20; fi
  # PIPETRAIN_TEST_TIMES=1: each check's seconds, to find where a slow script spends them.
  [ -n "${PIPETRAIN_TEST_TIMES:-}" ] && echo "$((SECONDS - started)) s: $name"
  return 0
}
expect() {  # expect NAME TEXT [FILE]: FILE (default: the last checked command's output) has TEXT
  local file=${3:-$tmp/out}
  if grep -q -- "$2" "$file"; then passed=$((passed + 1)); else
    failed=$((failed + 1)); echo "FAIL: $1: $file lacks '$2'"; grep -v '^PROGRESS' "$file" | tail -5; fi
}
refuses() {  # refuses NAME EXPECTED-TEXT COMMAND...: an exit of its own (1-127), message on stderr
  local name=$1 text=$2; shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local status=$?
  if [ "$status" -eq 0 ]; then
    failed=$((failed + 1)); echo "FAIL: $name (exit 0)"
  elif [ "$status" -ge 128 ]; then  # killed by a signal: a crash, not a refusal
    failed=$((failed + 1)); echo "FAIL: $name: died of signal $((status - 128))"; tail -3 "$tmp/err"
  elif ! grep -q -- "$text" "$tmp/err"; then
    failed=$((failed + 1)); echo "FAIL: $name: stderr lacks '$text':"; head -5 "$tmp/err"
  else passed=$((passed + 1)); fi
}
wait_for_checkpoint() {  # wait_for_checkpoint DIR TRIES: until DIR holds a complete checkpoint (20 tries a second)
  for _ in $(seq "$2"); do
    compgen -G "$1/step-*/manifest.json" >/dev/null && return
    sleep 0.05
  done
}
finish() {  # finish NAME: the summary line, and the exit status
  echo "$1: $passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
