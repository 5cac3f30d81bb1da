#!/usr/bin/env bash
# Issue 17's figures, one run on this machine (read the ratios, not the absolutes):
#   1. produce throughput of a transactional producer committing every 100 ms against the
#      idempotent producer (acks=all) on the same broker, and against the idempotent
#      producer waiting for its buffered records every 100 ms as a commit does (what
#      committing costs the client alone), the order rotating round by round
#      (target >= 0.8x);
#   2. a consumer catching up read_committed against read_uncommitted over the same range,
#      a topic in which a tenth of the transactions aborted: the range per second, as the
#      ratio of the two times (target >= 0.9x);
#   3. EndTxn latency p99 on three brokers (RF=3, min.insync.replicas=2).
# Usage: benches/transactions.sh [seconds per run, default 15] [rounds, default 3]
#   after cargo build --release -p strata -p strata-benches.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-15}
ROUNDS=${2:-3}
PARTS=${PARTS:-6}
BIN=target/release/strata
LG=target/release/strata-benches
[ -x "$BIN" ] && [ -x "$LG" ] || { echo "build first: cargo build --release -p strata -p strata-benches" >&2; exit 1; }
DIR=$(mktemp -d /tmp/strata-txn-bench.XXXXXX)
PIDS=()
cleanup() { kill -9 "${PIDS[@]}" 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT
serve() { # id ip voters dir
  "$BIN" serve --node-id "$1" --data-dir "$DIR/$4" --kafka-addr "$2:29192" --http-addr "$2:0" \
    --controller-addr "$2:29193" --controller-voters "$3" --object-store "file://$DIR/cold-$4" \
    >"$DIR/$4.out" 2>"$DIR/$4.err" &
  PIDS+=($!)
}
wait_up() { for _ in $(seq 100); do grep -q "strata listening" "$DIR/$1.out" 2>/dev/null && return; sleep 0.1; done; echo "$1 did not start" >&2; cat "$DIR/$1.err" >&2; exit 1; }
result() { grep '^RESULT' | sed 's/^RESULT //'; }
field() { python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(eval(sys.argv[2], {}, d))" "$1" "$2"; }
median() { python3 -c "import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }

BOOT=127.0.0.1:29192
serve 1 127.0.0.1 1@127.0.0.1:29193 single
wait_up single
PID=${PIDS[0]}
IDEM=(); TXN=(); FLUSH=()
for r in $(seq "$ROUNDS"); do
  case $((r % 3)) in 1) order="idem flush txn";; 2) order="txn idem flush";; *) order="flush txn idem";; esac
  for kind in $order; do
    t="p-$kind-$r"
    "$BIN" topic create "$t" --partitions "$PARTS" --bootstrap "$BOOT" >/dev/null
    # Both with the Java client's 32 MiB buffer: a transaction's commit waits until what
    # the client buffered is delivered, and librdkafka's default of 1 GiB makes a
    # flat-out producer spend most of each 100 ms draining it.
    extra=(--idempotent --max-buffered 32MiB)
    [ "$kind" = txn ] && extra+=(--transactional-id "bench-$r" --commit-interval 100ms)
    [ "$kind" = flush ] && extra+=(--flush-interval 100ms)
    "$LG" produce --bootstrap "$BOOT" --topic "$t" --acks all "${extra[@]}" --duration "${SECS}s" \
      --broker-pid "$PID" --no-progress >"$DIR/$t.out"
    R=$(result <"$DIR/$t.out")
    v=$(field "$R" mb_per_s)
    echo "  round $r $kind: $v MB/s"
    case $kind in txn) TXN+=("$v");; flush) FLUSH+=("$v");; *) IDEM+=("$v");; esac
    "$BIN" topic delete "$t" --bootstrap "$BOOT" >/dev/null
  done
done
P=$(python3 -c "print(round($(median "${TXN[@]}")/$(median "${IDEM[@]}"), 3))")
F=$(python3 -c "print(round($(median "${TXN[@]}")/$(median "${FLUSH[@]}"), 3))")
echo "1. transactional produce (commit every 100 ms) / idempotent: ${P}x (medians $(median "${TXN[@]}") vs $(median "${IDEM[@]}") MB/s);"
echo "   / idempotent flushing every 100 ms: ${F}x (median $(median "${FLUSH[@]}") MB/s)"

# 2. One topic, a tenth of its transactions aborted, read back both ways.
"$BIN" topic create catchup --partitions "$PARTS" --bootstrap "$BOOT" >/dev/null
"$LG" produce --bootstrap "$BOOT" --topic catchup --acks all --transactional-id writer \
  --commit-interval 100ms --abort-every 10 --duration "${SECS}s" --no-progress >"$DIR/w.out"
RC=(); RU=()
for r in $(seq "$ROUNDS"); do
  for iso in $( [ $((r % 2)) -eq 1 ] && echo "read_committed read_uncommitted" || echo "read_uncommitted read_committed"); do
    "$LG" consume --bootstrap "$BOOT" --topic catchup --isolation "$iso" --broker-pid "$PID" --no-progress >"$DIR/c.out"
    R=$(result <"$DIR/c.out")
    s=$(field "$R" seconds)
    echo "  round $r $iso: $s s ($(field "$R" records) records, broker CPU $(field "$R" broker_cpu_seconds) s)"
    if [ "$iso" = read_committed ]; then RC+=("$s"); else RU+=("$s"); fi
  done
done
C=$(python3 -c "print(round($(median "${RU[@]}")/$(median "${RC[@]}"), 3))")
echo "2. read_committed catch-up / read_uncommitted, same range (10% aborted): ${C}x"
kill -9 "${PIDS[@]}"; PIDS=(); sleep 0.5

# 3. Three brokers.
VOTERS=1@127.0.0.1:29193,2@127.0.0.2:29193,3@127.0.0.3:29193
BOOT3=127.0.0.1:29192,127.0.0.2:29192,127.0.0.3:29192
for i in 1 2 3; do serve "$i" "127.0.0.$i" "$VOTERS" "n$i"; done
for i in 1 2 3; do wait_up "n$i"; done
"$BIN" topic create three --partitions "$PARTS" --replication-factor 3 --config min.insync.replicas=2 --bootstrap "$BOOT3" >/dev/null
sleep 2
"$LG" produce --bootstrap "$BOOT3" --topic three --acks all --transactional-id three \
  --commit-interval 100ms --duration "${SECS}s" --no-progress >"$DIR/three.out"
R=$(result <"$DIR/three.out")
echo "3. EndTxn on three brokers: p50 $(field "$R" "end_txn['p50_ms']") ms, p99 $(field "$R" "end_txn['p99_ms']") ms, max $(field "$R" "end_txn['max_ms']") ms over $(field "$R" "settings['transactions']") transactions"
