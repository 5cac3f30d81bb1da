#!/usr/bin/env bash
# Restart after a clean stop with data in the active segments (issue 19, part 2): the
# build before the clean-shutdown marker (every open CRC-scans its whole active segment
# and replays its producers' batch headers) against the build after (the open scans
# only the active segment's last index interval; the stop snapshots producer state).
#
# Each build gets its own data directory: PARTS partitions, an idempotent producer
# writing MB MiB of 1 KiB records to each (all in the active segments: segment.bytes is
# 1 GiB). Then ROUNDS times, alternating the builds: clean stop, restart, seconds until
# it listens and until the last partition serves a read (kcat).
# Usage: BEFORE=path/to/old/strata benches/restart.sh [PARTS, default 64] [MB, default 32] [ROUNDS, default 3]
#        (after cargo build --release -p strata -p strata-benches; needs kcat)
set -euo pipefail
cd "$(dirname "$0")/.."
PARTS=${1:-64}
MB=${2:-32}
ROUNDS=${3:-3}
AFTER=${AFTER:-target/release/strata}
BEFORE=${BEFORE:?set BEFORE to the strata binary built before the change}
LG=target/release/strata-benches
[ -x "$AFTER" ] && [ -x "$BEFORE" ] && [ -x "$LG" ] || { echo "build first: cargo build --release -p strata -p strata-benches" >&2; exit 1; }
DIR=$(mktemp -d /tmp/strata-restart-bench.XXXXXX)
PID=
cleanup() { [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null; rm -rf "$DIR"; }
trap cleanup EXIT
B=127.0.0.1:29493
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$(now)"; }
start() { # BIN DATA
    : >"$DIR/out"
    "$1" serve --data-dir "$2" --kafka-addr "$B" --http-addr 127.0.0.1:0 --controller-addr 127.0.0.1:29494 >"$DIR/out" 2>>"$DIR/err" &
    PID=$!
    for _ in $(seq 2400); do grep -q "strata listening" "$DIR/out" 2>/dev/null && return; sleep 0.05; done
    echo "the broker did not start" >&2; tail "$DIR/err" >&2; exit 1
}
stop() { kill -TERM "$PID"; wait "$PID" || true; PID=; }
ready() {
    local t0=$1
    for _ in $(seq 600); do
        if timeout 5 kcat -C -b "$B" -t restart -p "$((PARTS - 1))" -o beginning -c 1 -e -q >/dev/null 2>&1; then
            since "$t0"; return
        fi
        sleep 0.05
    done
    echo "never"
}
records=$((PARTS * MB * 1024))
for build in before after; do
    bin=$([ "$build" = before ] && echo "$BEFORE" || echo "$AFTER")
    start "$bin" "$DIR/$build"
    "$bin" topic create restart --partitions "$PARTS" --bootstrap "$B" >/dev/null
    "$LG" produce --bootstrap "$B" --topic restart --keyed --keys "$((PARTS * 8))" --records "$records" --acks all --idempotent --no-progress 2>&1 | grep -E "records/s" | head -1
    stop
    echo "$build: $(du -sm "$DIR/$build" | cut -f1) MiB in $DIR/$build"
done
for round in $(seq "$ROUNDS"); do
    for build in before after; do
        bin=$([ "$build" = before ] && echo "$BEFORE" || echo "$AFTER")
        t0=$(now); start "$bin" "$DIR/$build"; listen=$(since "$t0"); serve=$(ready "$t0")
        echo "round $round $build: listening after $listen s, last partition serves after $serve s"
        stop
    done
done
