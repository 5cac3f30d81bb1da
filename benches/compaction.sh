#!/usr/bin/env bash
# Issue 16's figure: a producer's p99 delivery latency on one topic while the log cleaner
# compacts another flat out (at the broker's default --log-cleaner-io-max-bytes-per-second
# unless CAP is set), against the same producer while the cleaner is idle, round by round
# on one broker. Read the ratio, not the absolutes.
#
# Usage: benches/compaction.sh [seconds per measurement, default 20] [rounds, default 3]
#   after cargo build --release -p strata -p strata-benches.
#   FILL: bytes of updates written to the compacted topic each round (default 2GiB: more
#         than the cleaner gets through in one measurement, which the script checks);
#   RATE: the measured producer's records per second (1 KiB each, acks=all; default 5000);
#   CAP:  the cleaner's IO cap (e.g. 0 for none); PIN=1 pins the broker to CPU 0 and the
#         load generators to CPU 1.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}
ROUNDS=${2:-3}
FILL=${FILL:-2GiB}
RATE=${RATE:-5000}
BIN=${BIN:-target/release/strata}
LG=${LG:-target/release/strata-benches}
[ -x "$BIN" ] && [ -x "$LG" ] || { echo "build first: cargo build --release -p strata -p strata-benches" >&2; exit 1; }
BROKER_CPU=(); LG_CPU=()
if [ -n "${PIN:-}" ]; then BROKER_CPU=(taskset -c 0); LG_CPU=(taskset -c 1); fi
DIR=$(mktemp -d /tmp/strata-compaction-bench.XXXXXX)
PID=
cleanup() { [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT
BOOT=127.0.0.1:29392
extra=()
if [ -n "${CAP:-}" ]; then extra=(--log-cleaner-io-max-bytes-per-second "$CAP"); fi
"${BROKER_CPU[@]}" "$BIN" serve --data-dir "$DIR/data" --kafka-addr "$BOOT" --http-addr 127.0.0.1:0 \
  --controller-addr 127.0.0.1:29393 --object-store "file://$DIR/cold" \
  --log-cleaner-backoff 300ms "${extra[@]}" >"$DIR/out" 2>"$DIR/err" &
PID=$!
for _ in $(seq 200); do grep -q "strata listening" "$DIR/out" 2>/dev/null && break; sleep 0.1; done
grep -q "strata listening" "$DIR/out" || { echo "the broker did not start" >&2; cat "$DIR/err" >&2; exit 1; }
HTTP=$(grep -o 'http=[^ ]*' "$DIR/out" | head -1 | cut -d= -f2)
"$BIN" topic create live --partitions 1 --bootstrap "$BOOT" >/dev/null
"$BIN" topic create churn --partitions 1 --bootstrap "$BOOT" --config cleanup.policy=compact \
  --config segment.bytes=67108864 --config min.compaction.lag.ms=86400000 >/dev/null

status() { # field of churn's partition 0 in /v1/cleaner/status
  curl -s "http://$HTTP/v1/cleaner/status" | python3 -c "
import json, sys
for p in json.load(sys.stdin)['partitions']:
    if p['topic'] == 'churn':
        print(p['$1'])"
}
measure() { # name
  "${LG_CPU[@]}" "$LG" produce --bootstrap "$BOOT" --topic live --acks all --rate "$RATE" \
    --duration "${SECS}s" --warmup 2s --no-progress | grep '^RESULT' | sed 's/^RESULT //' >>"$DIR/$1.json"
}
wait_cleaned() { # until nothing cleanable is left (the active segment never is)
  for _ in $(seq 1200); do
    [ "$(status dirty_bytes)" = "0" ] && return 0
    sleep 0.5
  done
  echo "the cleaner did not finish" >&2; exit 1
}
records=$(( $(python3 -c "import re,sys; s='$FILL'; m=re.match(r'(\d+)(\w*)', s); n=int(m.group(1)); u=m.group(2).lower(); print(n*{'':1,'b':1,'kib':1024,'mib':1<<20,'gib':1<<30,'mb':10**6,'gb':10**9}[u])") / 1024 ))

for r in $(seq "$ROUNDS"); do
  echo "== round $r/$ROUNDS"
  # Dirty data the cleaner may not touch yet (min.compaction.lag.ms is a day).
  "$BIN" topic alter churn --set min.compaction.lag.ms=86400000 --bootstrap "$BOOT" >/dev/null
  "${LG_CPU[@]}" "$LG" produce --bootstrap "$BOOT" --topic churn --keyed --keys 100000 \
    --records "$records" --acks 1 --no-progress >/dev/null
  if [ $((r % 2)) -eq 1 ]; then measure idle; fi
  passes=$(status passes)
  "$BIN" topic alter churn --set min.compaction.lag.ms=0 --bootstrap "$BOOT" >/dev/null
  # The cleaner looks every 300 ms (--log-cleaner-backoff).
  sleep 1
  measure cleaning
  if [ "$(status passes)" != "$passes" ]; then
    echo "  warning: the cleaner finished before the measurement did; raise FILL" >&2
  fi
  wait_cleaned
  if [ $((r % 2)) -eq 0 ]; then measure idle; fi
done
echo "cleaner reclaimed $(status reclaimed_bytes) bytes in $(status passes) passes"

python3 - "$DIR/idle.json" "$DIR/cleaning.json" <<'PY'
import json, statistics, sys
def load(p):
    return [json.loads(l) for l in open(p) if l.strip()]
idle, busy = load(sys.argv[1]), load(sys.argv[2])
def p99(rs):
    return [r["latency"]["p99_ms"] for r in rs]
print(f"p99 ms, cleaner idle:     {[round(x, 2) for x in p99(idle)]}")
print(f"p99 ms, cleaner cleaning: {[round(x, 2) for x in p99(busy)]}")
print(f"p99 ratio (median cleaning / median idle): {statistics.median(p99(busy)) / statistics.median(p99(idle)):.3f}")
PY
