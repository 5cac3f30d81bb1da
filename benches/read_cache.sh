#!/usr/bin/env bash
# The read cache (issue 19's figure): two consumers reading the same data just
# produced, in direct-IO mode (the default), each as a ratio to the produce rate.
#   1. one broker, a topic of PARTS partitions; GB gigabytes of 1 KiB records produced
#      flat out (acks=1): the produce rate;
#   2. the broker restarted with --log-read-cache 0 (no read cache: the build before
#      it): two consumers at once, each reading everything from the start;
#   3. restarted with --log-read-cache 256MiB: the same two consumers;
#   4. restarted in buffered mode, the data in the page cache: the same two consumers
#      (the ceiling on this machine, where all of it shares the cores).
# A restart leaves nothing in memory; the data on the device is the same for 2 and 3.
# Usage: benches/read_cache.sh [GB, default 4] [PARTS, default 6]
#        (after cargo build --release -p strata -p strata-benches)
set -euo pipefail
cd "$(dirname "$0")/.."
GB=${1:-4}
PARTS=${2:-6}
BIN=${BIN:-target/release/strata}
LG=target/release/strata-benches
[ -x "$BIN" ] && [ -x "$LG" ] || { echo "build first: cargo build --release -p strata -p strata-benches" >&2; exit 1; }
DIR=$(mktemp -d /tmp/strata-read-cache.XXXXXX)
PID=
cleanup() { [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null; rm -rf "$DIR"; }
trap cleanup EXIT
B=127.0.0.1:29293
start() {
  : >"$DIR/out"
  "$BIN" serve --data-dir "$DIR/data" --kafka-addr "$B" --http-addr 127.0.0.1:0 --controller-addr 127.0.0.1:29294 "$@" >"$DIR/out" 2>>"$DIR/err" &
  PID=$!
  for _ in $(seq 600); do grep -q "strata listening" "$DIR/out" 2>/dev/null && return; sleep 0.1; done
  echo "the broker did not start" >&2; tail "$DIR/err" >&2; exit 1
}
stop() { kill "$PID"; wait "$PID" 2>/dev/null || true; PID=; }
mbps() { python3 -c "import json,sys; print(json.loads(sys.stdin.read().split('RESULT ',1)[1].splitlines()[0])['mb_per_s'])"; }
two() { # label
  "$LG" consume --bootstrap "$B" --topic t --isolation read_uncommitted --no-progress >"$DIR/c1" 2>&1 &
  local c1=$!
  "$LG" consume --bootstrap "$B" --topic t --isolation read_uncommitted --no-progress >"$DIR/c2" 2>&1
  wait $c1
  local a b
  a=$(mbps <"$DIR/c1"); b=$(mbps <"$DIR/c2")
  python3 -c "print(f'$1: consumers at $a and $b MB/s: {$a/$P:.2f}x and {$b/$P:.2f}x the produce rate')"
}

start
"$BIN" topic create t --partitions "$PARTS" --bootstrap "$B" >/dev/null
RECORDS=$(( GB * 1024 * 1024 ))
"$LG" produce --bootstrap "$B" --topic t --acks 1 --records "$RECORDS" --no-progress >"$DIR/p" 2>&1
P=$(mbps <"$DIR/p")
echo "produced $GB GiB at $P MB/s"
stop
start --log-read-cache 0
two "no read cache "
stop
start --log-read-cache 256MiB
two "read cache    "
curl -s "http://$(grep -o 'http=[0-9.:]*' "$DIR/out" | cut -d= -f2)/metrics" | grep -E "^strata_log_read_cache_(hits|misses)_total" || true
stop
# The machine's ceiling for two consumers: the page cache (buffered mode) holds all of
# it, so no read waits on the device; what is left is CPU (the broker and both
# consumers share this machine's cores).
start --log-io buffered
two "page cache    "
stop
