#!/usr/bin/env bash
# Offset-commit figures, in one run on this machine (read the ratios):
#   1. a producer alone at a fixed rate (acks=1, 1 KiB): its delivery p99 (the baseline);
#   2. offset commits alone from N clients (each its own group, one partition per commit);
#   3. both at once: commits per second and the producer's p99 against (1).
# The commit clients run on the same two cores as the broker and the producer.
# Usage: benches/groups.sh [seconds per run, default 15]  (after cargo build --release)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-15}
RATE=${RATE:-20000}
CLIENTS=${CLIENTS:-8}
BIN=target/release/strata
LG=target/release/strata-benches
[ -x "$BIN" ] && [ -x "$LG" ] || { echo "build first: cargo build --release -p strata -p strata-benches" >&2; exit 1; }
DIR=$(mktemp -d /tmp/strata-groups-bench.XXXXXX)
PID=
cleanup() { [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null; rm -rf "$DIR"; }
trap cleanup EXIT
B=127.0.0.1:29392
"$BIN" serve --data-dir "$DIR/data" --kafka-addr "$B" --http-addr 127.0.0.1:0 --controller-addr 127.0.0.1:0 >"$DIR/out" 2>"$DIR/err" &
PID=$!
for _ in $(seq 100); do grep -q "strata listening" "$DIR/out" 2>/dev/null && break; sleep 0.1; done
"$BIN" topic create t --partitions 6 --bootstrap "$B" >/dev/null
result() { grep '^RESULT' "$1" | sed 's/^RESULT //'; }
field() { python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(eval(sys.argv[2], {}, d))" "$1" "$2"; }
produce() { "$LG" produce --bootstrap "$B" --topic t --rate "$RATE" --warmup 2s --duration "${SECS}s" --no-progress >"$1"; }
commits() { "$LG" commits --bootstrap "$B" --topic t --clients "$CLIENTS" --duration "$1" --no-progress >"$2"; }

echo "== 1. producer alone ($RATE records/s, ${SECS}s)"
produce "$DIR/p1"; grep latency "$DIR/p1"
echo "== 2. commits alone ($CLIENTS clients, ${SECS}s)"
commits "${SECS}s" "$DIR/c2"; grep -E "records/s|latency" "$DIR/c2"
echo "== 3. both at once"
commits "$((SECS + 3))s" "$DIR/c3" &
CP=$!
sleep 1
produce "$DIR/p3"; grep latency "$DIR/p3"
wait "$CP"; grep -E "records/s|latency" "$DIR/c3"

P1=$(field "$(result "$DIR/p1")" "latency['p99_ms']")
P3=$(field "$(result "$DIR/p3")" "latency['p99_ms']")
C2=$(field "$(result "$DIR/c2")" records_per_s)
C3=$(field "$(result "$DIR/c3")" records_per_s)
echo
echo "== figures (same run)"
echo "offset commits per second: alone $(printf %.0f "$C2"), with the producer $(printf %.0f "$C3") (target >= 10000)"
echo "producer p99: alone $P1 ms, with commits $P3 ms = $(python3 -c "print(round($P3/$P1, 2))")x (target < 2x)"
