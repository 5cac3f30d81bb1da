#!/usr/bin/env bash
# Metadata deltas (issue 19, part 3): what one metadata change costs a broker of a
# cluster with many partitions. Two brokers (127.0.0.1, the controller's voter, and
# 127.0.0.2), RF=2, PARTS partitions in topics of 500 (seconds to create them); then
# CHANGES config changes of one small topic, one at a time (`strata topic alter --set`,
# which answers once the controller applied it). For broker 2 over those changes:
#   - bytes on its connections to the controller (`ss -tin` on 127.0.0.1:29193: the
#     long poll's answers, heartbeats and AlterPartitions), per change;
#   - CPU seconds of its process (utime + stime from /proc), per change, less what it
#     spends idle over as long (measured just before: heartbeats, housekeeping and the
#     replica fetchers' long polls of PARTS partitions).
# Compare two builds in one go: BASE=path/to/old/strata runs the same with it first.
# Usage: benches/metadata.sh [PARTS, default 9000] [CHANGES, default 50]  (BIN=, BASE=)
#        (after cargo build --release -p strata)
set -euo pipefail
cd "$(dirname "$0")/.."
PARTS=${1:-9000}
CHANGES=${2:-50}
BIN=${BIN:-target/release/strata}
[ -x "$BIN" ] || { echo "build first: cargo build --release -p strata" >&2; exit 1; }
command -v ss >/dev/null || { echo "needs ss (iproute2)" >&2; exit 1; }
DIR=$(mktemp -d /tmp/strata-metadata-bench.XXXXXX)
PIDS=()
cleanup() { kill -9 "${PIDS[@]}" 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$DIR"; }
trap cleanup EXIT
PORT=29292
CPORT=29293
VOTERS=1@127.0.0.1:$CPORT
BOOT=127.0.0.1:$PORT,127.0.0.2:$PORT

serve() { # bin id
  "$1" serve --node-id "$2" --data-dir "$DIR/n$2" --kafka-addr "127.0.0.$2:$PORT" --http-addr "127.0.0.$2:0" \
    --controller-addr "127.0.0.$2:$CPORT" --controller-voters "$VOTERS" \
    >"$DIR/n$2.out" 2>"$DIR/n$2.err" &
  PIDS+=($!)
}
wait_up() { for _ in $(seq 600); do grep -q "strata listening" "$DIR/n$1.out" 2>/dev/null && return; sleep 0.1; done; echo "n$1 did not start" >&2; tail "$DIR/n$1.err" >&2; exit 1; }
. benches/lib/wire.sh
controller_bytes() { wire_bytes "$1" "127.0.0.1:$CPORT"; }
# CPU clock ticks (user + system) of process PID.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run() { # label bin
  rm -rf "$DIR"/n1 "$DIR"/n2; sync; sleep 3; PIDS=()
  serve "$2" 1; serve "$2" 2
  wait_up 1; wait_up 2
  local t0 n
  t0=$(date +%s.%N)
  for ((n = 0; n * 500 < PARTS; n++)); do
    "$2" topic create "idle$n" --partitions "$(( PARTS - n * 500 < 500 ? PARTS - n * 500 : 500 ))" --replication-factor 2 --bootstrap "$BOOT" --timeout 60s >/dev/null
  done
  local created
  created=$(python3 -c "import time; print(round(time.time() - $t0, 1))")
  "$2" topic create small --partitions 1 --replication-factor 2 --bootstrap "$BOOT" >/dev/null
  sleep 15 # followers caught up, ISRs full, nothing left moving
  local b0 c0 b1 c1 i i0 i1
  i0=$(cpu_ticks "${PIDS[1]}"); sleep 10; i1=$(cpu_ticks "${PIDS[1]}")
  b0=$(controller_bytes "${PIDS[1]}"); c0=$(cpu_ticks "${PIDS[1]}"); t0=$(date +%s.%N)
  for ((i = 0; i < CHANGES; i++)); do
    "$2" topic alter small --set "retention.ms=$((3600000 + i))" --bootstrap "$BOOT" >/dev/null
  done
  sleep 2 # the last change reaches broker 2
  b1=$(controller_bytes "${PIDS[1]}"); c1=$(cpu_ticks "${PIDS[1]}")
  python3 -c "
import os, time
hz = os.sysconf('SC_CLK_TCK')
n, secs = $CHANGES, time.time() - $t0
idle = ($i1 - $i0) / hz / 10
cpu = max(0.0, ($c1 - $c0) / hz - idle * secs)
print(f'$1: {$PARTS} partitions created in $created s; per change, broker 2: '
      f'{($b1 - $b0) / n / 1024:.1f} KiB to and from the controller, '
      f'{cpu / n * 1000:.1f} ms CPU above idle ({idle * 1000:.0f} ms/s; {n} changes in {secs:.1f} s)')"
  kill -TERM "${PIDS[@]}"; wait "${PIDS[@]}" 2>/dev/null || true; PIDS=()
}

if [ -n "${BASE:-}" ]; then run base "$BASE"; fi
run this "$BIN"
