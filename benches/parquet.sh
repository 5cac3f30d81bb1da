#!/usr/bin/env bash
# Parquet conversion's cost to producers, in one run on this machine (read the ratio):
#   1. a producer flat out (acks=1, 1 KiB) to a topic of its own: throughput (the baseline);
#   2. the same while the broker converts a preloaded parquet.enable topic's sealed
#      segments (set after the preload, so conversion has a backlog for the whole run).
# The transcoding speed itself is `cargo bench -p strata-parquet --bench transcode`.
# Usage: benches/parquet.sh [seconds per run, default 15]  (after cargo build --release)
# COLD=DIR puts the object store (a local directory) elsewhere: by default it shares the
# data dir's disk, so the Parquet files' writes compete with the producer's for that one
# disk; COLD=/dev/shm/x stands in for a bucket off the broker's disk (S3), as in
# production, leaving the CPU cost of conversion.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-15}
PRELOAD=${PRELOAD:-4000000}
BIN=target/release/strata
LG=target/release/strata-benches
[ -x "$BIN" ] && [ -x "$LG" ] || { echo "build first: cargo build --release -p strata -p strata-benches" >&2; exit 1; }
DIR=$(mktemp -d /tmp/strata-parquet-bench.XXXXXX)
COLD=${COLD:-$DIR/cold}
mkdir -p "$COLD"
PID=
cleanup() { if [ -n "$PID" ]; then kill -9 "$PID" 2>/dev/null; wait "$PID" 2>/dev/null || true; fi; rm -rf "$DIR" "$COLD"; }
trap cleanup EXIT
B=127.0.0.1:29492
H=127.0.0.1:29493
"$BIN" serve --data-dir "$DIR/data" --object-store "file://$COLD" --kafka-addr "$B" --http-addr "$H" --controller-addr 127.0.0.1:0 >"$DIR/out" 2>"$DIR/err" &
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

# The preload normally comes after run 1, so its segments are still in the page cache
# when they are converted (as a segment is when conversion keeps up); PRELOAD_FIRST=1
# preloads before run 1 instead, so run 1's writes push the backlog out of the cache and
# conversion reads it from the disk the producer writes to (a backlog being caught up).
preload() {
    echo "== preload: $PRELOAD records of 1 KiB into 'lake' (parquet.enable off)"
    "$LG" produce --bootstrap "$B" --topic lake --records "$PRELOAD" --no-progress >/dev/null
    # Let the offloader upload the preload first, so only conversion differs between runs.
    for _ in $(seq 600); do
        lag=$(curl -s "http://$H/v1/tier/status" | python3 -c 'import json,sys; print(sum(p["offload_lag_bytes"] for p in json.load(sys.stdin)["partitions"]))')
        [ "$lag" = 0 ] && break; sleep 0.5
    done
}
[ "${PRELOAD_FIRST:-0}" = 1 ] && preload
echo "== 1. producer alone (${SECS}s)"
produce "$DIR/p1"; grep -E "MB/s|records/s" "$DIR/p1" | head -3
[ "${PRELOAD_FIRST:-0}" = 1 ] || preload
echo "== 2. producer while 'lake' converts"
"$BIN" topic alter lake --set parquet.enable=true --bootstrap "$B" >/dev/null
for _ in $(seq 100); do [ "$(metric strata_parquet_rows_total)" != 0 ] && break; sleep 0.1; done
ROWS0=$(metric strata_parquet_rows_total)
produce "$DIR/p2"; grep -E "MB/s|records/s" "$DIR/p2" | head -3
ROWS1=$(metric strata_parquet_rows_total)
LEFT=$(backlog)
echo "converted during run 2: $((ROWS1 - ROWS0)) rows; still to convert at its end: $LEFT offsets"
[ "$LEFT" -gt 0 ] || echo "WARNING: conversion finished before run 2 did; raise PRELOAD" >&2
if grep -q "[1-9][0-9]* errors" "$DIR/p2"; then cp "$DIR/err" /tmp/parquet-bench-broker.log; echo "producer errors: broker log in /tmp/parquet-bench-broker.log" >&2; fi

T1=$(field "$(result "$DIR/p1")" "mb_per_s")
T2=$(field "$(result "$DIR/p2")" "mb_per_s")
echo
echo "== figures (same run)"
echo "producer throughput: alone $T1 MB/s, while converting $T2 MB/s = $(python3 -c "print(round($T2/$T1, 3))")x (target > 0.85x)"
