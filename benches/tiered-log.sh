#!/usr/bin/env bash
# Issue 15's figures: produce throughput, a hot fetch (a consumer reading back what is
# still on local disk) and a cold catch-up (a consumer reading from the start after
# every sealed segment has been offloaded and deleted locally, so the reads come from the
# object store through the chunk cache) of this build against another build (the one
# before the tiered-log refactor), alternating the two round by round so the machine's
# noise falls on both. Read the ratios, not the absolutes.
#
# Usage: benches/tiered-log.sh OLD_STRATA_BINARY [produce seconds, default 10] [rounds, default 3]
#   after cargo build --release -p strata -p strata-benches; build the old binary from
#   03d037d, e.g. git worktree add /tmp/strata-base 03d037d && cd /tmp/strata-base && cargo build --release -p strata
# PIN=1 pins the broker to CPU 0 and the load generator to CPU 1.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: benches/tiered-log.sh OLD_STRATA_BINARY [seconds] [rounds]}
SECS=${2:-10}
ROUNDS=${3:-3}
PARTS=${PARTS:-4}
BROKER_CPU=(); LG_CPU=()
if [ -n "${PIN:-}" ]; then BROKER_CPU=(taskset -c 0); LG_CPU=(taskset -c 1); fi
NEW=${NEW:-target/release/strata}
LG=${LG:-target/release/strata-benches}
[ -x "$NEW" ] && [ -x "$LG" ] || { echo "build first: cargo build --release -p strata -p strata-benches" >&2; exit 1; }
[ -x "$OLD" ] || { echo "$OLD is not an executable strata binary" >&2; exit 1; }
DIR=$(mktemp -d /tmp/strata-tiered-bench.XXXXXX)
PID=
cleanup() { [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT
BOOT=127.0.0.1:29292

run() { # name binary round
  local d="$DIR/$1-$3"
  mkdir -p "$d"
  "${BROKER_CPU[@]}" "$2" serve --data-dir "$d/data" --kafka-addr "$BOOT" --http-addr 127.0.0.1:0 \
    --controller-addr 127.0.0.1:29293 --object-store "file://$d/cold" \
    --retention-check-interval 1s >"$d/out" 2>"$d/err" &
  PID=$!
  for _ in $(seq 200); do grep -q "strata listening" "$d/out" 2>/dev/null && break; sleep 0.1; done
  grep -q "strata listening" "$d/out" || { echo "$1 did not start" >&2; cat "$d/err" >&2; exit 1; }
  HTTP=$(grep -o 'http=[^ ]*' "$d/out" | head -1 | cut -d= -f2)
  # Small segments, and local retention that keeps almost nothing once offloaded.
  "$NEW" topic create bench --partitions "$PARTS" --bootstrap "$BOOT" \
    --config remote.storage.enable=true --config segment.bytes=8388608 \
    --config local.retention.bytes=1 --config retention.bytes=-1 >/dev/null
  "${LG_CPU[@]}" "$LG" produce --bootstrap "$BOOT" --topic bench --acks 1 --duration "${SECS}s" \
    --broker-pid "$PID" --no-progress | grep '^RESULT' | sed 's/^RESULT //' >>"$DIR/$1.produce.json"
  # Cold: wait until each partition's sealed segments are offloaded and gone locally
  # (the local start moved past 0 on every partition).
  moved=False
  for _ in $(seq 600); do
    moved=$(curl -s "http://$HTTP/v1/tier/status" | python3 -c '
import json, sys
s = json.load(sys.stdin)
print(all(p["local_start_offset"] > 0 for p in s["partitions"] if p["topic"] == "bench"))')
    [ "$moved" = True ] && break
    sleep 0.5
  done
  [ "$moved" = True ] || { echo "$1: local segments were not offloaded and deleted in time" >&2; exit 1; }
  "${LG_CPU[@]}" "$LG" consume --bootstrap "$BOOT" --topic bench --broker-pid "$PID" --no-progress \
    | grep '^RESULT' | sed 's/^RESULT //' >>"$DIR/$1.cold.json"
  kill -9 "$PID"; wait "$PID" 2>/dev/null || true; PID=
  rm -rf "$d"
}

# Hot fetch: a topic without tiering, read back at once (all on local disk).
run_hot() { # name binary round
  local d="$DIR/$1-hot-$3"
  mkdir -p "$d"
  "${BROKER_CPU[@]}" "$2" serve --data-dir "$d/data" --kafka-addr "$BOOT" --http-addr 127.0.0.1:0 \
    --controller-addr 127.0.0.1:29293 --object-store "file://$d/cold" >"$d/out" 2>"$d/err" &
  PID=$!
  for _ in $(seq 200); do grep -q "strata listening" "$d/out" 2>/dev/null && break; sleep 0.1; done
  grep -q "strata listening" "$d/out" || { echo "$1 did not start" >&2; cat "$d/err" >&2; exit 1; }
  "$NEW" topic create bench --partitions "$PARTS" --bootstrap "$BOOT" >/dev/null
  "${LG_CPU[@]}" "$LG" produce --bootstrap "$BOOT" --topic bench --acks 1 --duration "${SECS}s" \
    --no-progress >/dev/null
  "${LG_CPU[@]}" "$LG" consume --bootstrap "$BOOT" --topic bench --broker-pid "$PID" --no-progress \
    | grep '^RESULT' | sed 's/^RESULT //' >>"$DIR/$1.hot.json"
  kill -9 "$PID"; wait "$PID" 2>/dev/null || true; PID=
  rm -rf "$d"
}

for r in $(seq "$ROUNDS"); do
  echo "round $r/$ROUNDS" >&2
  # Alternate which build goes first: the first run of a round inherits the previous
  # one's disk state (files just deleted, the device's queue), which biased one build
  # when it always went second.
  if [ $((r % 2)) -eq 1 ]; then
    run old "$OLD" "$r"; run new "$NEW" "$r"; run_hot old "$OLD" "$r"; run_hot new "$NEW" "$r"
  else
    run new "$NEW" "$r"; run old "$OLD" "$r"; run_hot new "$NEW" "$r"; run_hot old "$OLD" "$r"
  fi
done

python3 - "$DIR" <<'EOF'
import json, statistics, sys
d = sys.argv[1]
def load(name):
    return [json.loads(l) for l in open(f"{d}/{name}.json") if l.strip()]
print(f"{'figure':<28}{'old':>12}{'new':>12}{'new/old':>10}")
for kind, label in [("produce", "produce MB/s (tiered)"), ("hot", "hot fetch MB/s"), ("cold", "cold catch-up MB/s")]:
    old, new = load(f"old.{kind}"), load(f"new.{kind}")
    o = statistics.median(x["mb_per_s"] for x in old)
    n = statistics.median(x["mb_per_s"] for x in new)
    print(f"{label:<28}{o:>12.1f}{n:>12.1f}{n / o:>10.3f}")
    oc = [x["broker_cpu_s_per_gb"] for x in old if x.get("broker_cpu_s_per_gb")]
    nc = [x["broker_cpu_s_per_gb"] for x in new if x.get("broker_cpu_s_per_gb")]
    if oc and nc:
        o, n = statistics.median(oc), statistics.median(nc)
        print(f"{'  broker CPU s/GB':<28}{o:>12.2f}{n:>12.2f}{n / o:>10.3f}")
EOF
