#!/usr/bin/env bash
# Fetch sessions (KIP-227), issue 19's figure: replica fetch bytes on the wire.
# Two brokers (127.0.0.1 and 127.0.0.2), RF=2: a topic "idle" of IDLE partitions and a
# topic "active" of 10 (the idle ones in topics of 500), so each broker follows about (IDLE+10)/2 partitions of the
# other's, 5 of them active. For SECS seconds a producer writes RATE records/s of 1 KiB
# to "active" (none: RATE=0); the bytes both brokers' replica fetchers send and receive
# (`ss -tin` on their connections to each other's Kafka port: bytes_acked and
# bytes_received, TCP payload) are divided by the seconds, and by the record bytes
# produced (each is replicated once).
# Two runs in one go: sessions off on both (--fetch-session-cache-slots 0: the answers
# the build before sessions gave), then the default.
# Usage: benches/fetch_sessions.sh [IDLE, default 9990] [SECS, default 20]  (RATE=, BIN=, ONLY=on|off)
#        (after cargo build --release -p strata -p strata-benches)
set -euo pipefail
cd "$(dirname "$0")/.."
IDLE=${1:-9990}
SECS=${2:-20}
RATE=${RATE:-200}
BIN=${BIN:-target/release/strata}
LG=target/release/strata-benches
[ -x "$BIN" ] && [ -x "$LG" ] || { echo "build first: cargo build --release -p strata -p strata-benches" >&2; exit 1; }
command -v ss >/dev/null || { echo "needs ss (iproute2)" >&2; exit 1; }
DIR=$(mktemp -d /tmp/strata-fetch-sessions.XXXXXX)
PIDS=()
cleanup() { kill -9 "${PIDS[@]}" 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$DIR"; }
trap cleanup EXIT
PORT=29192
VOTERS=1@127.0.0.1:29193
BOOT=127.0.0.1:$PORT,127.0.0.2:$PORT

serve() { # id extra...
  local id=$1; shift
  "$BIN" serve --node-id "$id" --data-dir "$DIR/n$id" --kafka-addr "127.0.0.$id:$PORT" --http-addr "127.0.0.$id:0" \
    --controller-addr "127.0.0.$id:29193" --controller-voters "$VOTERS" --object-store "file://$DIR/cold" \
    "$@" >"$DIR/n$id.out" 2>"$DIR/n$id.err" &
  PIDS+=($!)
}
wait_up() { for _ in $(seq 600); do grep -q "strata listening" "$DIR/n$1.out" 2>/dev/null && return; sleep 0.1; done; echo "n$1 did not start" >&2; tail "$DIR/n$1.err" >&2; exit 1; }
. benches/lib/wire.sh
replica_bytes() { echo $(( $(wire_bytes "${PIDS[1]}" "127.0.0.1:$PORT") + $(wire_bytes "${PIDS[0]}" "127.0.0.2:$PORT") )); }

run() { # label slots
  rm -rf "$DIR"/n1 "$DIR"/n2 "$DIR"/cold; sync; sleep 5; PIDS=()
  serve 1 --fetch-session-cache-slots "$2"; serve 2 --fetch-session-cache-slots "$2"
  wait_up 1; wait_up 2
  local t0 n; t0=$(date +%s.%N)
  # In topics of at most 500 partitions: one CreateTopics of 10,000 on two brokers
  # outlasts the CLI's request timeout on this machine's disk.
  for ((n = 0; n * 500 < IDLE; n++)); do
    "$BIN" topic create "idle$n" --partitions "$(( IDLE - n * 500 < 500 ? IDLE - n * 500 : 500 ))" --replication-factor 2 --bootstrap "$BOOT" >/dev/null
  done
  echo "$1: created $IDLE partitions in $(python3 -c "import time; print(round(time.time() - $t0, 1))") s" >&2
  "$BIN" topic create active --partitions 10 --replication-factor 2 --bootstrap "$BOOT" >/dev/null
  sleep 15 # every follower caught up, the ISRs full
  local b0 b1 t0 t1
  b0=$(replica_bytes); t0=$(date +%s.%N)
  if [ "$RATE" -gt 0 ]; then
    "$LG" produce --bootstrap "$BOOT" --topic active --acks all --rate "$RATE" --duration "${SECS}s" --no-progress >"$DIR/p.out" 2>&1
  else
    sleep "$SECS"
  fi
  b1=$(replica_bytes); t1=$(date +%s.%N)
  python3 -c "
secs = $t1 - $t0
wire = ($b1 - $b0) / secs
payload = $RATE * 1024
print(f'$1: replica fetch traffic {wire/1e3:.1f} KB/s' + (f', {wire/payload:.2f}x the record bytes replicated ({payload/1e3:.1f} KB/s)' if payload else ' at idle'))"
  kill -9 "${PIDS[@]}"; wait "${PIDS[@]}" 2>/dev/null || true; PIDS=()
  sleep 1
}

echo "== $IDLE idle + 10 active partitions, RF=2, two brokers; $RATE records/s of 1 KiB for ${SECS}s"
[ "${ONLY:-}" = on ] || run "sessions off" 0
[ "${ONLY:-}" = off ] || run "sessions on " 1000
