#!/usr/bin/env bash
# A slow fsync on one partition against the latency of others (issue 19, part 7), in one
# run on this machine (read the ratios):
#   1. a producer to topic `fast` at a fixed rate (acks=1, 1 KiB): its delivery p99 alone;
#   2. the same while another producer writes flat out to topic `slow`, whose
#      flush.messages=1 makes every append fsync: `fast`'s p99 against (1).
# Run it with the build before a change as BIN=... and with the build after.
# Usage: benches/blocking.sh [seconds per run, default 15]
#        (after cargo build --release -p strata -p strata-benches)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-15}
RATE=${RATE:-5000}
BIN=${BIN:-target/release/strata}
LG=target/release/strata-benches
[ -x "$BIN" ] && [ -x "$LG" ] || { echo "build first: cargo build --release -p strata -p strata-benches" >&2; exit 1; }
DIR=$(mktemp -d /tmp/strata-blocking-bench.XXXXXX)
PID=
cleanup() { [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null; rm -rf "$DIR"; }
trap cleanup EXIT
B=127.0.0.1:29397
"$BIN" serve --data-dir "$DIR/data" --kafka-addr "$B" --http-addr 127.0.0.1:0 --controller-addr 127.0.0.1:0 >"$DIR/out" 2>"$DIR/err" &
PID=$!
for _ in $(seq 100); do grep -q "strata listening" "$DIR/out" 2>/dev/null && break; sleep 0.1; done
"$BIN" topic create fast --partitions 4 --bootstrap "$B" >/dev/null
"$BIN" topic create slow --partitions 1 --config flush.messages=1 --bootstrap "$B" >/dev/null
fast() { "$LG" produce --bootstrap "$B" --topic fast --rate "$RATE" --warmup 2s --duration "${SECS}s" --no-progress >"$1"; }

echo "== 1. fast alone ($RATE records/s, ${SECS}s)"
fast "$DIR/f1"; grep -E "latency" "$DIR/f1"
echo "== 2. fast while slow fsyncs every append"
"$LG" produce --bootstrap "$B" --topic slow --linger-ms 0 --duration "$((SECS + 4))s" --no-progress >"$DIR/s2" &
SP=$!
sleep 1
fast "$DIR/f2"; grep -E "latency" "$DIR/f2"
wait "$SP"; grep -E "records/s" "$DIR/s2"
