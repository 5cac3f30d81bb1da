#!/usr/bin/env bash
# REST gateway figures, in one run on this machine (read the ratios):
#   1. Kafka-protocol produce flat out of JSON records (1 KiB values, acks=all and
#      idempotent, as the gateway's own producer): the baseline;
#   2. the same records (same key and value bytes) over HTTP: POST /topics/T with
#      application/vnd.kafka.json.v2+json, 500 records a request, CONNS keep-alive
#      connections each with one request in flight;
#   3. a producer at RATE records/s while a Kafka consumer and the gateway's SSE stream
#      (GET /consumers/G/stream, acknowledging every 100 records or 100 ms), each in its
#      own group, read the topic: each one's end-to-end p99 (send to receipt, one clock).
# The broker, the gateway inside it and the load generator share this machine's cores.
# Usage: benches/gateway.sh [seconds per run, default 15]  (after cargo build --release)
# KEYED=1 gives the records keys (murmur2-partitioned on both paths).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-15}
CONNS=${CONNS:-4}
BATCH=${BATCH:-500}
RATE=${RATE:-2000}
KEYED=${KEYED:-0}
BIN=target/release/strata
LG=target/release/strata-benches
[ -x "$BIN" ] && [ -x "$LG" ] || { echo "build first: cargo build --release -p strata -p strata-benches" >&2; exit 1; }
DIR=$(mktemp -d /tmp/strata-gateway-bench.XXXXXX)
PID=
cleanup() { if [ -n "$PID" ]; then kill -9 "$PID" 2>/dev/null; wait "$PID" 2>/dev/null || true; fi; rm -rf "$DIR"; }
trap cleanup EXIT
B=127.0.0.1:29592
H=127.0.0.1:29593
"$BIN" serve --data-dir "$DIR/data" --kafka-addr "$B" --http-addr "$H" --controller-addr 127.0.0.1:0 >"$DIR/out" 2>"$DIR/err" &
PID=$!
for _ in $(seq 100); do grep -q "strata listening" "$DIR/out" 2>/dev/null && break; sleep 0.1; done
for _ in $(seq 100); do [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$H/readyz")" = 200 ] && break; sleep 0.1; done
for t in kafka http; do "$BIN" topic create "$t" --partitions 6 --bootstrap "$B" >/dev/null; done
"$BIN" topic create live --partitions 4 --bootstrap "$B" >/dev/null
result() { grep '^RESULT' "$1" | sed 's/^RESULT //'; }
field() { python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(eval(sys.argv[2], {}, d))" "$1" "$2"; }
KEY=()
[ "$KEYED" = 1 ] && KEY=(--keyed)

# Each run starts with no dirty pages left from the one before: writeback of a previous
# run's gigabytes would take CPU and disk from the next.
settle() { sync; sleep 1; }
settle
echo "== 1. Kafka produce of the JSON records (acks=all, idempotent, ${SECS}s)"
"$LG" produce --bootstrap "$B" --topic kafka --json-values --record-size 1KiB "${KEY[@]}" \
    --acks all --idempotent --duration "${SECS}s" --broker-pid "$PID" --no-progress >"$DIR/p1"
grep '^  ' "$DIR/p1"
"$BIN" topic delete kafka --bootstrap "$B" >/dev/null
settle
echo "== 2. the same records over HTTP ($BATCH a request, $CONNS connections, ${SECS}s)"
"$LG" http-produce --http "$H" --topic http --record-size 1KiB "${KEY[@]}" --batch "$BATCH" \
    --connections "$CONNS" --duration "${SECS}s" --broker-pid "$PID" --no-progress >"$DIR/p2"
grep '^  ' "$DIR/p2"
"$BIN" topic delete http --bootstrap "$B" >/dev/null
settle
echo "== 3. SSE stream vs Kafka consumer at $RATE records/s (${SECS}s, 2s warm-up)"
"$LG" sse-latency --bootstrap "$B" --http "$H" --topic live --rate "$RATE" \
    --duration "${SECS}s" --warmup 2s --no-progress >"$DIR/e3"
grep '^  ' "$DIR/e3"

K=$(field "$(result "$DIR/p1")" records_per_s)
KM=$(field "$(result "$DIR/p1")" mb_per_s)
W=$(field "$(result "$DIR/p2")" records_per_s)
WM=$(field "$(result "$DIR/p2")" mb_per_s)
E=$(result "$DIR/e3")
KP99=$(field "$E" "end_to_end['kafka']['latency']['p99_ms']")
SP99=$(field "$E" "end_to_end['sse']['latency']['p99_ms']")
MISS=$(field "$E" "end_to_end['kafka']['missed'] + end_to_end['sse']['missed']")
echo
echo "== figures (same run)"
echo "JSON produce: Kafka $(printf %.0f "$K") records/s ($(printf %.1f "$KM") MB/s), HTTP $(printf %.0f "$W") records/s ($(printf %.1f "$WM") MB/s) = $(python3 -c "print(round($W/$K, 3))")x (target >= 0.5x)"
echo "end-to-end p99: Kafka consumer $KP99 ms, SSE $SP99 ms: SSE adds $(python3 -c "print(round($SP99-$KP99, 2))") ms (target < 5 ms); records missed: $MISS"
