#!/usr/bin/env bash
# Checkpoints per broker (issue 19, part 1): what one checkpoint interval costs a broker
# of PARTS partitions that all took a record since the last one. One broker, PARTS
# partitions in topics of 500, 5,000 keyed records per topic (every partition gets some);
# then, traced with strace over one checkpoint interval (60 s) plus a little:
#   - fsync and rename calls of the whole process (the checkpoint writes; idle otherwise);
# and the time from SIGTERM to exit (the clean shutdown flushes and checkpoints).
# Compare two builds in one go: BASE=path/to/old/strata runs the same with it first.
# Usage: benches/checkpoints.sh [PARTS, default 9000]  (BIN=, BASE=)
#        (after cargo build --release -p strata)
set -euo pipefail
cd "$(dirname "$0")/.."
PARTS=${1:-9000}
BIN=${BIN:-target/release/strata}
[ -x "$BIN" ] || { echo "build first: cargo build --release -p strata" >&2; exit 1; }
command -v strace >/dev/null || { echo "needs strace" >&2; exit 1; }
DIR=$(mktemp -d /tmp/strata-checkpoints-bench.XXXXXX)
PID=
cleanup() { [ -z "$PID" ] || kill -9 "$PID" 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$DIR"; }
trap cleanup EXIT
PORT=29392
BOOT=127.0.0.1:$PORT

run() { # label bin
  rm -rf "$DIR/data"; sync; sleep 2
  "$2" serve --data-dir "$DIR/data" --kafka-addr "$BOOT" --http-addr 127.0.0.1:0 \
    --controller-addr 127.0.0.1:29393 >"$DIR/out" 2>"$DIR/err" &
  PID=$!
  for _ in $(seq 600); do grep -q "strata listening" "$DIR/out" 2>/dev/null && break; sleep 0.1; done
  grep -q "strata listening" "$DIR/out" || { echo "$1 did not start" >&2; tail "$DIR/err" >&2; exit 1; }
  local n
  for ((n = 0; n * 500 < PARTS; n++)); do
    "$2" topic create "c$n" --partitions "$(( PARTS - n * 500 < 500 ? PARTS - n * 500 : 500 ))" --bootstrap "$BOOT" --timeout 60s >/dev/null
    seq 0 4999 | sed 's/.*/k&:v/' | "$2" produce --topic "c$n" --key-separator : --bootstrap "$BOOT" >/dev/null 2>&1
  done
  local moved
  moved=$(find "$DIR/data" -mindepth 2 -maxdepth 2 -name '*.log' -size +0 | wc -l)
  strace -f -c -e trace=fsync,fdatasync,rename,renameat,renameat2 -p "$PID" -o "$DIR/strace" &
  local st=$!
  sleep 65
  kill -INT "$st"; wait "$st" 2>/dev/null || true
  local t0 t1
  t0=$(date +%s.%N)
  kill -TERM "$PID"; wait "$PID" 2>/dev/null || true; PID=
  t1=$(date +%s.%N)
  python3 - "$DIR/strace" <<EOF
import sys
calls = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) >= 5 and f[-1] in ("fsync", "fdatasync", "rename", "renameat", "renameat2"):
        calls[f[-1]] = int(f[3])
print(f"$1: {$PARTS} partitions, $moved with records; over 65 s (one checkpoint interval): "
      + ", ".join(f"{k} {v}" for k, v in sorted(calls.items()))
      + f"; clean shutdown {($t1 - $t0):.1f} s")
EOF
}

if [ -n "${BASE:-}" ]; then run base "$BASE"; fi
run this "$BIN"
