#!/usr/bin/env bash
# A/B of the consumer read path: the same data (written once, by B), read back from the
# start read_uncommitted by two builds of the broker in turn on the same data directory,
# three rounds; MB/s and the broker's CPU seconds per read.
# Usage: benches/fetch-ab.sh A_BINARY [seconds of produce, default 15]
#   e.g. build the commit before a change into another target dir and pass its strata.
set -uo pipefail
cd "$(dirname "$0")/.."
A=${1:?"usage: benches/fetch-ab.sh A_BINARY [seconds]"}; B=target/release/strata; LG=target/release/strata-benches
DIR=$(mktemp -d /tmp/strata-fetch-ab.XXXXXX)
PID=
trap '[ -n "$PID" ] && kill -9 "$PID" 2>/dev/null; rm -rf "$DIR"' EXIT
start() { "$1" serve --node-id 1 --data-dir "$DIR/d" --kafka-addr 127.0.0.1:29192 --http-addr 127.0.0.1:0 \
  --controller-addr 127.0.0.1:29193 --controller-voters 1@127.0.0.1:29193 --object-store "file://$DIR/cold" >"$DIR/out" 2>"$DIR/err" &
  PID=$!; for _ in $(seq 200); do grep -q "strata listening" "$DIR/out" && break; sleep 0.1; done; sleep 1; }
stop() { kill $PID; wait $PID 2>/dev/null; PID=; }
start $B
$B topic create t --partitions 6 --bootstrap 127.0.0.1:29192 >/dev/null
$LG produce --bootstrap 127.0.0.1:29192 --topic t --acks all --idempotent --duration ${2:-15}s --no-progress | grep -o '"records":[0-9]*'
stop
for r in 1 2 3; do
  for v in A B; do
    [ $v = A ] && bin=$A || bin=$B
    start $bin
    $LG consume --bootstrap 127.0.0.1:29192 --topic t --broker-pid $PID --no-progress | python3 -c "
import sys,json
for l in sys.stdin:
  if l.startswith('RESULT'):
    d=json.loads(l[7:]); print('$v', round(d['seconds'],2),'s', round(d['mb_per_s'],1), 'MB/s', d['records'],'rec', 'bcpu',d['broker_cpu_seconds'])
"
    stop
  done
done
