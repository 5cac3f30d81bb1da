#!/usr/bin/env bash
# Reassignment figures (issue 21), all in one run on this machine (read the ratios, not
# the absolutes):
#   0. the disk: sequential write + fsync (the four brokers share it);
#   1. an acks=all producer at a fixed rate on three brokers, nothing moving: p99 (the
#      baseline);
#   2. a fourth broker joins and `strata cluster add` moves a quarter of the replicas to
#      it, unthrottled, while the same producer runs: MB/s copied, and the producer's p99;
#   3. the same move back and forth again with --throttle: MB/s copied (it should sit at
#      the rate), and the producer's p99.
# Usage: benches/reassign.sh [MB per partition, default 200] [throttle, default 20MB]
#        (after cargo build --release -p strata -p strata-benches)
set -euo pipefail
cd "$(dirname "$0")/.."
MB=${1:-200}
THROTTLE=${2:-20MB}
PARTS=8
RATE=${RATE:-5000}
BIN=target/release/strata
LG=target/release/strata-benches
[ -x "$BIN" ] && [ -x "$LG" ] || { echo "build first: cargo build --release -p strata -p strata-benches" >&2; exit 1; }
DIR=$(mktemp -d /tmp/strata-reassign-bench.XXXXXX)
PIDS=()
cleanup() { kill -9 "${PIDS[@]}" 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$DIR"; }
trap cleanup EXIT

VOTERS=1@127.0.0.1:29093,2@127.0.0.2:29093,3@127.0.0.3:29093
BOOT=127.0.0.1:29092,127.0.0.2:29092,127.0.0.3:29092
serve() { # id
  "$BIN" serve --node-id "$1" --data-dir "$DIR/n$1" --kafka-addr "127.0.0.$1:29092" --http-addr "127.0.0.$1:0" \
    --controller-addr "127.0.0.$1:29093" --controller-voters "$VOTERS" --object-store "file://$DIR/cold" \
    >"$DIR/n$1.out" 2>"$DIR/n$1.err" &
  PIDS+=($!)
}
wait_up() { for _ in $(seq 100); do grep -q "strata listening" "$DIR/n$1.out" 2>/dev/null && return; sleep 0.1; done; echo "broker $1 did not start" >&2; cat "$DIR/n$1.err" >&2; exit 1; }
result() { grep '^RESULT' | sed 's/^RESULT //'; }
field() { python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(eval(sys.argv[2], {}, d))" "$1" "$2"; }
bytes_of() { du -sb "$DIR/n$1" | cut -f1; }
# The producer at $RATE in 5 s windows while `cond` holds (at least one window): prints
# the worst window's p99, the median window's p99, and the total errors.
windows() { # name cond...
  local name=$1; shift
  local p99s="" errors=0 i=0
  while :; do
    "$LG" produce --bootstrap "$BOOT" --topic bulk --acks all --idempotent --rate "$RATE" --duration 5s --warmup 1s --no-progress >"$DIR/$name.$i.out" 2>&1
    local r; r=$(result <"$DIR/$name.$i.out")
    p99s="$p99s $(field "$r" "latency['p99_ms']")"
    errors=$((errors + $(field "$r" errors)))
    i=$((i + 1))
    "$@" || break
  done
  python3 -c "import statistics,sys; v=[float(x) for x in sys.argv[1:]]; print(round(max(v),1), round(statistics.median(v),1), $errors)" $p99s
}
# Waits until no partition of bulk is under-replicated (replication caught up).
settle() {
  for _ in $(seq 600); do
    "$BIN" topic describe bulk --bootstrap "$BOOT" 2>/dev/null | grep -q UNDER-REPLICATED || { sleep 3; return; }
    sleep 0.5
  done
}
# Runs `strata cluster ARGS` in the background while the producer runs in windows;
# prints MB/s copied onto broker 4 (bytes it gained over the command's time), the
# command's seconds, the worst window's p99 and the producer's errors.
move() { # name args...
  local name=$1; shift
  local before; before=$(bytes_of 4)
  local t0; t0=$(date +%s.%N)
  ("$BIN" cluster "$@" --bootstrap "$BOOT" >"$DIR/$name.cli" 2>&1; date +%s.%N >"$DIR/$name.done") &
  read -r p99 median errors < <(windows "$name" test ! -e "$DIR/$name.done")
  wait
  local t1; t1=$(cat "$DIR/$name.done")
  local after; after=$(bytes_of 4)
  echo "$(python3 -c "print(round(($after-$before)/1e6/($t1-$t0), 1), round($t1-$t0, 1))") $p99 $median $errors"
}

echo "== 0. the disk: sequential write + fsync of 2 GiB"
mkdir -p "$DIR/disk"; "$LG" disk --dir "$DIR/disk" --bytes 2GiB >"$DIR/r0.out"; R0=$(result <"$DIR/r0.out"); rm -rf "$DIR/disk"
D0=$(field "$R0" disk_mb_per_s)

echo "== 1. three brokers; $PARTS partitions x $MB MB; acks=all at $RATE/s with nothing moving (4 x 5 s)"
for i in 1 2 3; do serve "$i"; done
for i in 1 2 3; do wait_up "$i"; done
"$BIN" topic create bulk --partitions "$PARTS" --replication-factor 3 --config min.insync.replicas=2 --bootstrap "$BOOT" >/dev/null
sleep 2
"$LG" produce --bootstrap "$BOOT" --topic bulk --acks 1 --records "$((MB * PARTS * 1000))" --record-size 1000 --no-progress >"$DIR/fill.out"
settle
n=0
read -r P1 M1 E1 < <(windows idle eval '[ $((n += 1)) -lt 4 ]')

echo "== 2. broker 4 joins; strata cluster add, unthrottled, while producing"
serve 4; wait_up 4; sleep 4
read -r MBS2 SECS2 P2 M2 E2 < <(move r2 add)

echo "== 3. broker 4 drained, then added again with --throttle $THROTTLE, while producing"
"$BIN" cluster decommission 4 --bootstrap "$BOOT" >"$DIR/drain.cli" 2>&1
for _ in $(seq 300); do [ "$(find "$DIR/n4" -maxdepth 1 -name 'bulk-*' | wc -l)" = 0 ] && break; sleep 0.2; done
settle
read -r MBS3 SECS3 P3 M3 E3 < <(move r3 add --throttle "$THROTTLE")

echo
echo "== figures (same run)"
echo "disk: $(python3 -c "print(round($D0, 1))") MB/s sequential write + fsync (four brokers share it)"
echo "unthrottled move: $MBS2 MB/s onto broker 4 in ${SECS2}s = $(python3 -c "print(round($MBS2/$D0, 2))")x the disk"
echo "throttled move (--throttle $THROTTLE, per side): $MBS3 MB/s in ${SECS3}s"
echo "producer p99 (acks=all, $RATE/s; 5 s windows, worst / median): idle $P1 / $M1 ms; during the unthrottled move $P2 / $M2 ms (worst $(python3 -c "print(round($P2/$P1, 1))")x idle's); during the throttled move $P3 / $M3 ms (worst $(python3 -c "print(round($P3/$P1, 1))")x idle's)"
echo "producer errors: idle $E1, unthrottled $E2, throttled $E3"
