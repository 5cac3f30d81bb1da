#!/usr/bin/env bash
# Replication figures, all in one run on this machine (read the ratios, not the absolutes):
#   1. acks=1 on a single broker, flat out (the baseline);
#   2. acks=all, idempotent, on three brokers (RF=3, min.insync.replicas=2), flat out;
#   3. acks=all at half of (2)'s rate: delivery p99 (after a 2 s warm-up: librdkafka asks
#      for the idempotent producer's id on a 500 ms timer at start-up);
#   4. the same rate while the leader of a partition is killed with kill -9: the longest
#      time one partition went without an acknowledgement (election + client metadata
#      refresh + retry), and that nothing failed.
# Usage: benches/replication.sh [seconds per run, default 20]  (after cargo build --release)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}
PARTS=${PARTS:-6}
# Kafka's default 1 GiB segments: a segment roll fsyncs in the append path (a known
# tail: with 64 MiB segments p99 at half rate is several times higher). The runs are short
# enough for the disk; the single broker's data is removed before the cluster starts.
LIMITS=(--config retention.bytes=2147483648)
BIN=target/release/strata
LG=target/release/strata-benches
[ -x "$BIN" ] && [ -x "$LG" ] || { echo "build first: cargo build --release -p strata -p strata-benches" >&2; exit 1; }
DIR=$(mktemp -d /tmp/strata-repl-bench.XXXXXX)
PIDS=()
cleanup() { kill -9 "${PIDS[@]}" 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$DIR"; }
trap cleanup EXIT

serve() { # id ip voters dir
  "$BIN" serve --node-id "$1" --data-dir "$DIR/$4" --kafka-addr "$2:29092" --http-addr "$2:0" \
    --controller-addr "$2:29093" --controller-voters "$3" --object-store "file://$DIR/cold-$4" \
    --retention-check-interval 1s \
    >"$DIR/$4.out" 2>"$DIR/$4.err" &
  PIDS+=($!)
}
wait_up() { for _ in $(seq 100); do grep -q "strata listening" "$DIR/$1.out" 2>/dev/null && return; sleep 0.1; done; echo "$1 did not start" >&2; cat "$DIR/$1.err" >&2; exit 1; }
result() { grep '^RESULT' | sed 's/^RESULT //'; }
show() { grep -v '^RESULT' "$DIR/$1.out"; }
field() { python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(eval(sys.argv[2], {}, d))" "$1" "$2"; }

echo "== 0. the disk: sequential write + fsync of 2 GiB (three brokers here share it)"
mkdir -p "$DIR/disk"; "$LG" disk --dir "$DIR/disk" --bytes 2GiB >"$DIR/r0.out"; show r0; R0=$(result <"$DIR/r0.out"); rm -rf "$DIR/disk"

echo "== 1. single broker, acks=1, flat out (${SECS}s)"
serve 1 127.0.0.1 1@127.0.0.1:29093 single
wait_up single
"$BIN" topic create one --partitions "$PARTS" "${LIMITS[@]}" --bootstrap 127.0.0.1:29092 >/dev/null
"$LG" produce --bootstrap 127.0.0.1:29092 --topic one --acks 1 --duration "${SECS}s" --no-progress >"$DIR/r1.out"
show r1; R1=$(result <"$DIR/r1.out")
kill -9 "${PIDS[0]}"; PIDS=(); sleep 0.5; rm -rf "$DIR/single"

echo "== 2. three brokers, acks=all idempotent, RF=3, flat out (${SECS}s)"
VOTERS=1@127.0.0.1:29093,2@127.0.0.2:29093,3@127.0.0.3:29093
BOOT=127.0.0.1:29092,127.0.0.2:29092,127.0.0.3:29092
for i in 1 2 3; do serve "$i" "127.0.0.$i" "$VOTERS" "n$i"; done
for i in 1 2 3; do wait_up "n$i"; done
"$BIN" topic create three --partitions "$PARTS" --replication-factor 3 --config min.insync.replicas=2 "${LIMITS[@]}" --bootstrap "$BOOT" >/dev/null
sleep 2
"$LG" produce --bootstrap "$BOOT" --topic three --acks all --idempotent --duration "${SECS}s" --no-progress >"$DIR/r2.out"
show r2; R2=$(result <"$DIR/r2.out")
MAX=$(field "$R2" records_per_s)
HALF=$(python3 -c "print(int($MAX/2))")

echo "== 3. three brokers, acks=all at half that rate ($HALF records/s, ${SECS}s)"
"$LG" produce --bootstrap "$BOOT" --topic three --acks all --idempotent --rate "$HALF" --duration "${SECS}s" --warmup 2s --no-progress >"$DIR/r3.out"
show r3; R3=$(result <"$DIR/r3.out")

echo "== 4. the same rate; broker 1 (a leader) killed with kill -9 after $((SECS/3))s"
("$LG" produce --bootstrap "$BOOT" --topic three --acks all --idempotent --keyed --rate "$HALF" --duration "${SECS}s" --timeout 60s --no-progress >"$DIR/r4.out" 2>&1) &
LGPID=$!
sleep $((SECS/3))
"$BIN" topic describe three --bootstrap 127.0.0.2:29092 | sed -n 2,$((PARTS+2))p
kill -9 "${PIDS[0]}"
KILLED_AT=$(date +%s.%N)
sleep 6
"$BIN" topic describe three --bootstrap 127.0.0.2:29092 | sed -n 2,$((PARTS+2))p
wait "$LGPID" || true
show r4
R4=$(result <"$DIR/r4.out")

echo
echo "== figures (same run)"
T1=$(field "$R1" mb_per_s); T2=$(field "$R2" mb_per_s)
T0=$(field "$R0" disk_mb_per_s)
echo "acks=all x3 / acks=1 x1 throughput: $T2 / $T1 MB/s = $(python3 -c "print(round($T2/$T1, 2))")x (target >= 0.5x)"
echo "  RF=3 on one disk writes every byte three times: acks=all x3 / (disk / 3) = $T2 / $(python3 -c "print(round($T0/3, 1))") MB/s = $(python3 -c "print(round($T2/($T0/3), 2))")x"
echo "acks=all p99 at half max rate: $(field "$R3" "latency['p99_ms']") ms (p50 $(field "$R3" "latency['p50_ms']") ms; target < 10 ms)"
echo "kill -9 of a leader: longest wait for an acknowledgement on one partition: $(field "$R4" "ack_gap['max_ms']") ms (target < 5000 ms); errors: $(field "$R4" errors)"
