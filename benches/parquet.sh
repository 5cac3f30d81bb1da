#!/usr/bin/env bash
# Parquet conversion's cost to producers, in one run on this machine (read the ratio):
#   1. a producer flat out (acks=1, 1 KiB) to a topic of its own: throughput (the baseline);
#   2. the same while the broker converts a preloaded parquet.enable topic's sealed
#      segments (set after the preload, so conversion has a backlog for the whole run).
# The transcoding speed itself is `cargo bench -p strata-parquet --bench transcode`.
# Usage: benches/parquet.sh [seconds per run, default 15]  (after cargo build --release)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-15}
PRELOAD=${PRELOAD:-4000000}
BIN=target/release/strata
LG=target/release/strata-benches
[ -x "$BIN" ] && [ -x "$LG" ] || { echo "build first: cargo build --release -p strata -p strata-benches" >&2; exit 1; }
DIR=$(mktemp -d /tmp/strata-parquet-bench.XXXXXX)
PID=
cleanup() { [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null; rm -rf "$DIR"; }
trap cleanup EXIT
B=127.0.0.1:29492
H=127.0.0.1:29493
"$BIN" serve --data-dir "$DIR/data" --object-store "file://$DIR/cold" --kafka-addr "$B" --http-addr "$H" --controller-addr 127.0.0.1:0 >"$DIR/out" 2>"$DIR/err" &
PID=$!
for _ in $(seq 100); do grep -q "strata listening" "$DIR/out" 2>/dev/null && break; sleep 0.1; done
"$BIN" topic create t --partitions 6 --bootstrap "$B" >/dev/null
"$BIN" topic create lake --partitions 2 --bootstrap "$B" \
    --config remote.storage.enable=true --config segment.bytes=67108864 >/dev/null
result() { grep '^RESULT' "$1" | sed 's/^RESULT //'; }
field() { python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(eval(sys.argv[2], {}, d))" "$1" "$2"; }
produce() { "$LG" produce --bootstrap "$B" --topic t --warmup 2s --duration "${SECS}s" --no-progress >"$1"; }
# Sum over lake's partitions of (sealed offsets not yet in Parquet).
backlog() {
    curl -s "http://$H/v1/tier/status" | python3 -c '
import json, sys
d = json.load(sys.stdin)
left = 0
for p in d["partitions"]:
    if p["topic"] != "lake":
        continue
    done = p["parquet_next_offset"] if p["parquet_next_offset"] is not None else p["local_start_offset"]
    left += max(0, p["local_end_offset"] - done)
print(left)'
}
metric() { curl -s "http://$H/metrics" | awk -v m="$1" '$1 ~ "^"m {s += $2} END {print s + 0}'; }

echo "== preload: $PRELOAD records of 1 KiB into 'lake' (parquet.enable off)"
"$LG" produce --bootstrap "$B" --topic lake --records "$PRELOAD" --no-progress >/dev/null
# Let the offloader upload the preload first, so only conversion differs between runs.
for _ in $(seq 600); do
    lag=$(curl -s "http://$H/v1/tier/status" | python3 -c 'import json,sys; print(sum(p["offload_lag_bytes"] for p in json.load(sys.stdin)["partitions"]))')
    [ "$lag" = 0 ] && break; sleep 0.5
done
echo "== 1. producer alone (${SECS}s)"
produce "$DIR/p1"; grep -E "MB/s|records/s" "$DIR/p1" | head -3
echo "== 2. producer while 'lake' converts"
"$BIN" topic alter lake --set parquet.enable=true --bootstrap "$B" >/dev/null
for _ in $(seq 100); do [ "$(metric strata_parquet_rows_total)" != 0 ] && break; sleep 0.1; done
ROWS0=$(metric strata_parquet_rows_total)
produce "$DIR/p2"; grep -E "MB/s|records/s" "$DIR/p2" | head -3
ROWS1=$(metric strata_parquet_rows_total)
LEFT=$(backlog)
echo "converted during run 2: $((ROWS1 - ROWS0)) rows; still to convert at its end: $LEFT offsets"
[ "$LEFT" -gt 0 ] || echo "WARNING: conversion finished before run 2 did; raise PRELOAD" >&2

T1=$(field "$(result "$DIR/p1")" "mb_per_s")
T2=$(field "$(result "$DIR/p2")" "mb_per_s")
echo
echo "== figures (same run)"
echo "producer throughput: alone $T1 MB/s, while converting $T2 MB/s = $(python3 -c "print(round($T2/$T1, 3))")x (target > 0.85x)"
