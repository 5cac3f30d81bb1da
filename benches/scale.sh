#!/usr/bin/env bash
# Partitions on one broker (issue 19's figures), in one run on this machine:
#   1. create TOPICS topics of PARTS partitions each (seconds per topic);
#   2. a producer per topic writes keyed 1 KiB records to every partition for SECS
#      seconds: peak RSS (VmHWM) and descriptors while it runs;
#   3. idle: RSS and descriptors after the producers stop, and after the tail buffers
#      of idle partitions were given back (35 s);
#   4. clean stop (seconds), restart until listening and until the last partition of
#      the last topic serves a read (seconds);
#   5. kill -9, restart the same way.
# Usage: benches/scale.sh [TOPICS, default 4] [PARTS, default 2500] [SECS, default 20]
#        (after cargo build --release -p strata -p strata-benches; needs kcat)
set -euo pipefail
cd "$(dirname "$0")/.."
TOPICS=${1:-4}
PARTS=${2:-2500}
SECS=${3:-20}
RATE=${RATE:-5000}
BIN=${BIN:-target/release/strata}
LG=target/release/strata-benches
[ -x "$BIN" ] && [ -x "$LG" ] || { echo "build first: cargo build --release -p strata -p strata-benches" >&2; exit 1; }
DIR=$(mktemp -d /tmp/strata-scale-bench.XXXXXX)
PID=
cleanup() { [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null; rm -rf "$DIR"; }
trap cleanup EXIT
B=127.0.0.1:29393
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$(now)"; }
start() {
    : >"$DIR/out"
    "$BIN" serve --data-dir "$DIR/data" --kafka-addr "$B" --http-addr 127.0.0.1:0 --controller-addr 127.0.0.1:29394 >"$DIR/out" 2>>"$DIR/err" &
    PID=$!
    for _ in $(seq 1200); do grep -q "strata listening" "$DIR/out" 2>/dev/null && return; sleep 0.05; done
    echo "the broker did not start" >&2; tail "$DIR/err" >&2; exit 1
}
rss_mb() { awk '/^VmRSS/ {printf "%.0f", $2/1024}' "/proc/$PID/status"; }
hwm_mb() { awk '/^VmHWM/ {printf "%.0f", $2/1024}' "/proc/$PID/status"; }
fds() { ls "/proc/$PID/fd" | wc -l; }
# Seconds until a read of the last partition of the last topic returns its records.
ready() {
    local t0=$1
    for _ in $(seq 600); do
        if timeout 5 kcat -C -b "$B" -t "t$TOPICS" -p "$((PARTS - 1))" -o beginning -c 1 -e -q >/dev/null 2>&1; then
            since "$t0"; return
        fi
        sleep 0.1
    done
    echo "never"
}

start
echo "== 1. create $TOPICS topics of $PARTS partitions"
for t in $(seq "$TOPICS"); do
    t0=$(now)
    "$BIN" topic create "t$t" --partitions "$PARTS" --bootstrap "$B" >/dev/null
    echo "t$t: $(since "$t0") s"
done
echo "after creation: RSS $(rss_mb) MB, $(fds) descriptors"

echo "== 2. $TOPICS producers, keyed 1 KiB records to every partition, ${SECS}s at $RATE records/s each"
for t in $(seq "$TOPICS"); do
    "$LG" produce --bootstrap "$B" --topic "t$t" --keyed --keys "$((PARTS * 4))" --rate "$RATE" --duration "${SECS}s" --no-progress >"$DIR/p$t" 2>&1 &
done
maxfd=0
for _ in $(seq "$SECS"); do sleep 1; f=$(fds); [ "$f" -gt "$maxfd" ] && maxfd=$f; done
wait $(jobs -p | grep -v "^$PID$") 2>/dev/null || true
for t in $(seq "$TOPICS"); do grep -E "records/s" "$DIR/p$t" | head -1; done
echo "while producing: peak RSS $(hwm_mb) MB, at most $maxfd descriptors"

echo "== 3. idle"
echo "just after: RSS $(rss_mb) MB, $(fds) descriptors"
sleep 35
echo "after 35 s: RSS $(rss_mb) MB, $(fds) descriptors"

echo "== 4. clean stop and restart"
t0=$(now); kill -TERM "$PID"; wait "$PID" || true; PID=
echo "clean stop: $(since "$t0") s"
t0=$(now); start; echo "listening after $(since "$t0") s"; echo "last partition serves after $(ready "$t0") s"
echo "after restart: RSS $(rss_mb) MB, $(fds) descriptors"

echo "== 5. kill -9 and restart"
kill -9 "$PID"; wait "$PID" 2>/dev/null || true; PID=
t0=$(now); start; echo "listening after $(since "$t0") s"; echo "last partition serves after $(ready "$t0") s"
