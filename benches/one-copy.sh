#!/usr/bin/env bash
# Issue 20's one-copy figures: a cold catch-up (a consumer reading from offset 0 after
# every sealed segment has left local disk, so the reads come from the bucket through the
# chunk cache) of a one-copy topic (remote.storage.format=parquet: batches re-encoded
# from the Parquet files) against the same data in a raw-segment topic with Parquet
# beside it (remote.storage.format=segments, parquet.enable=true), same binary, the two
# alternating round by round so the machine's noise falls on both; and the bucket bytes
# each keeps. Read the ratios, not the absolutes.
#
# Usage: benches/one-copy.sh [produce seconds, default 10] [rounds, default 3]
#   after cargo build --release -p strata -p strata-benches
# RECORD_SIZE (default 1KiB) and JSON=1 (JSON values, which compress, instead of fresh
# random bytes per record, which do not) shape the data; PIN=1 pins the broker to CPU 0 and the load
# generator to CPU 1.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
ROUNDS=${2:-3}
PARTS=${PARTS:-4}
RECORD_SIZE=${RECORD_SIZE:-1KiB}
BROKER_CPU=(); LG_CPU=()
if [ -n "${PIN:-}" ]; then BROKER_CPU=(taskset -c 0); LG_CPU=(taskset -c 1); fi
VALUES=(--unique-values); if [ -n "${JSON:-}" ]; then VALUES=(--json-values --keyed); fi
BIN=${BIN:-target/release/strata}
LG=${LG:-target/release/strata-benches}
[ -x "$BIN" ] && [ -x "$LG" ] || { echo "build first: cargo build --release -p strata -p strata-benches" >&2; exit 1; }
DIR=$(mktemp -d /tmp/strata-one-copy-bench.XXXXXX)
PID=
cleanup() { [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT
BOOT=127.0.0.1:29392

bytes_under() { # the bytes of the files under every cluster's directory $2 of root $1
  local n=0
  for c in "$1"/*/; do
    [ -d "$c$2" ] && n=$((n + $(du -sb "$c$2" | cut -f1)))
  done
  echo "$n"
}

run() { # name (raw|onecopy) round
  local d="$DIR/$1-$2"
  mkdir -p "$d"
  "${BROKER_CPU[@]}" "$BIN" serve --data-dir "$d/data" --kafka-addr "$BOOT" --http-addr 127.0.0.1:0 \
    --controller-addr 127.0.0.1:29393 --object-store "file://$d/cold" \
    --retention-check-interval 1s --iceberg-commit-interval 1s >"$d/out" 2>"$d/err" &
  PID=$!
  for _ in $(seq 200); do grep -q "strata listening" "$d/out" 2>/dev/null && break; sleep 0.1; done
  grep -q "strata listening" "$d/out" || { echo "$1 did not start" >&2; cat "$d/err" >&2; exit 1; }
  HTTP=$(grep -o 'http=[^ ]*' "$d/out" | head -1 | cut -d= -f2)
  local format=segments
  [ "$1" = onecopy ] && format=parquet
  # Small segments, and local retention that keeps almost nothing once in the bucket.
  "$BIN" topic create bench --partitions "$PARTS" --bootstrap "$BOOT" \
    --config remote.storage.enable=true --config parquet.enable=true \
    --config remote.storage.format=$format --config segment.bytes=8388608 \
    --config local.retention.bytes=1 --config retention.bytes=-1 >/dev/null
  "${LG_CPU[@]}" "$LG" produce --bootstrap "$BOOT" --topic bench --acks 1 --duration "${SECS}s" \
    --record-size "$RECORD_SIZE" "${VALUES[@]}" --no-progress >/dev/null
  # Cold: wait until each partition's sealed segments are in the bucket (offloaded and
  # converted, or for one copy converted) and gone locally: only the active segment
  # (at most segment.bytes) is left on disk.
  moved=False
  for _ in $(seq 2400); do
    moved=$(curl -s "http://$HTTP/v1/tier/status" | python3 -c '
import json, sys
s = json.load(sys.stdin)
print(all(p["local_bytes"] <= 8388608 + 1048576 and p["offload_lag_bytes"] == 0
          for p in s["partitions"] if p["topic"] == "bench"))')
    [ "$moved" = True ] && break
    sleep 0.5
  done
  [ "$moved" = True ] || { echo "$1: local segments did not leave local disk in time" >&2; exit 1; }
  "${LG_CPU[@]}" "$LG" consume --bootstrap "$BOOT" --topic bench --broker-pid "$PID" --no-progress \
    | grep '^RESULT' | sed 's/^RESULT //' >>"$DIR/$1.cold.json"
  # The Parquet files the manifests list, apart from those small-file compaction
  # replaced, which stay until the Iceberg snapshots naming them expire (an hour).
  local listed
  listed=$(python3 -c '
import glob, json, sys
print(sum(f["bytes"] for m in glob.glob(sys.argv[1] + "/*/parquet/topic=bench/*/_manifest.json")
          for f in json.load(open(m))["files"]))' "$d/cold")
  printf '{"segments": %s, "parquet": %s, "listed": %s, "iceberg": %s}\n' \
    "$(bytes_under "$d/cold" topics)" "$(bytes_under "$d/cold" parquet)" "$listed" \
    "$(bytes_under "$d/cold" iceberg)" >>"$DIR/$1.bucket.json"
  kill -9 "$PID"; wait "$PID" 2>/dev/null || true; PID=
  rm -rf "$d"
}

for r in $(seq "$ROUNDS"); do
  echo "round $r/$ROUNDS" >&2
  if [ $((r % 2)) -eq 1 ]; then run raw "$r"; run onecopy "$r"; else run onecopy "$r"; run raw "$r"; fi
done

python3 - "$DIR" <<'EOF'
import json, statistics, sys
d = sys.argv[1]
def load(name):
    return [json.loads(l) for l in open(f"{d}/{name}.json") if l.strip()]
raw, one = load("raw.cold"), load("onecopy.cold")
print(f"{'figure':<34}{'raw segments':>14}{'one copy':>14}{'one/raw':>10}")
r = statistics.median(x["mb_per_s"] for x in raw)
o = statistics.median(x["mb_per_s"] for x in one)
print(f"{'cold catch-up MB/s':<34}{r:>14.1f}{o:>14.1f}{o / r:>10.3f}")
rc = [x["broker_cpu_s_per_gb"] for x in raw if x.get("broker_cpu_s_per_gb")]
oc = [x["broker_cpu_s_per_gb"] for x in one if x.get("broker_cpu_s_per_gb")]
if rc and oc:
    r, o = statistics.median(rc), statistics.median(oc)
    print(f"{'  broker CPU s/GB':<34}{r:>14.2f}{o:>14.2f}{o / r:>10.3f}")
rb, ob = load("raw.bucket"), load("onecopy.bucket")
for b in rb + ob:
    b["replaced"] = b["parquet"] - b["listed"]
def ratio(xs, runs, f):
    return statistics.median(f(b) / max(c["bytes"], 1) for b, c in zip(xs, runs))
rows = [("bucket: raw segments", lambda b: b["segments"]),
        ("bucket: Parquet files listed", lambda b: b["listed"]),
        ("bucket: Iceberg metadata", lambda b: b["iceberg"]),
        ("bucket: kept, steady state", lambda b: b["segments"] + b["listed"] + b["iceberg"]),
        ("  + replaced, until expiry", lambda b: b["replaced"])]
print("(bucket bytes per byte consumed)")
for label, f in rows:
    r, o = ratio(rb, raw, f), ratio(ob, one, f)
    tail = f"{o / r:>10.3f}" if r > 0 and "steady" in label else ""
    print(f"{label:<34}{r:>14.3f}{o:>14.3f}{tail}")
EOF
