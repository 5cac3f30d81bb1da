#!/usr/bin/env bash
# Schema registry figures (issue 37), in one run on this machine (read the ratios):
#   1. produce to one topic with confluent.value.schema.validation=true vs false (switched
#      between runs), the same values (Confluent's header naming a registered id),
#      alternating the order, ROUNDS rounds;
#   2. GET /schemas/ids/{id} latency (a keep-alive client, 5,000 requests): p50, p99;
#   3. a registration's latency (POST /subjects/{s}/versions, a new version each time).
# Usage: benches/registry.sh [seconds per run, default 15] [rounds, default 3]
#   (after cargo build --release -p strata -p strata-benches)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-15}
ROUNDS=${2:-3}
BIN=target/release/strata
LG=target/release/strata-benches
[ -x "$BIN" ] && [ -x "$LG" ] || { echo "build first: cargo build --release -p strata -p strata-benches" >&2; exit 1; }
DIR=$(mktemp -d /tmp/strata-registry-bench.XXXXXX)
PID=
cleanup() { [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$DIR"; }
trap cleanup EXIT

"$BIN" serve --node-id 1 --data-dir "$DIR/data" --kafka-addr 127.0.0.1:29392 --http-addr 127.0.0.1:0 \
  --controller-addr 127.0.0.1:29393 --controller-voters 1@127.0.0.1:29393 \
  --object-store "file://$DIR/cold" --schema-registry-addr 127.0.0.1:29381 \
  >"$DIR/out" 2>"$DIR/err" &
PID=$!
for _ in $(seq 200); do grep -q "strata listening" "$DIR/out" && break; sleep 0.1; done
grep -q "strata listening" "$DIR/out" || { echo "the broker did not start" >&2; cat "$DIR/err" >&2; exit 1; }
REG=http://127.0.0.1:29381
mbs() { python3 -c "
import sys,json
for l in sys.stdin:
  if l.startswith('RESULT'):
    d=json.loads(l[7:]); print(round(d['mb_per_s'],1), round(d.get('broker_cpu_seconds',0) or 0,2))
"; }
BOUNDED=(--config retention.bytes=536870912 --config segment.bytes=134217728)
# One topic, validation switched per run: two topics differ by more than the config (a
# control run with validation off on both showed the second one 0.77x in later rounds).
"$BIN" topic create v --partitions 6 "${BOUNDED[@]}" --bootstrap 127.0.0.1:29392 >/dev/null
ID=$("$BIN" schema register --registry "$REG" --subject v-value \
  --schema '{"type":"record","name":"R","fields":[{"name":"data","type":"bytes"}]}' | awk '{print $2}')

echo "== 1. produce with validation on vs off (schema id $ID), ${SECS}s each, $ROUNDS rounds"
for r in $(seq "$ROUNDS"); do
  # Each order in turn: a run's retention deletes what the run before it wrote.
  order="off on"; [ $((r % 2)) -eq 0 ] && order="on off"
  for t in $order; do
    v=false; [ "$t" = on ] && v=true
    "$BIN" topic alter v --set "confluent.value.schema.validation=$v" --bootstrap 127.0.0.1:29392 >/dev/null
    sleep 1
    p=$("$LG" produce --bootstrap 127.0.0.1:29392 --topic v --acks all --idempotent \
      --schema-id "$ID" --duration "${SECS}s" --broker-pid "$PID" --no-progress | mbs)
    echo "round $r validation=$t produce MB/s,broker-cpu: $p"
  done
done

echo "== 2. GET /schemas/ids/$ID and 3. registrations"
python3 - "$REG" "$ID" <<'PY'
import http.client, json, sys, time
reg, sid = sys.argv[1], sys.argv[2]
host = reg.split("//")[1]
c = http.client.HTTPConnection(host)
def pct(xs, p):
    xs = sorted(xs); return xs[min(len(xs) - 1, int(len(xs) * p))] * 1000
lat = []
for _ in range(5000):
    t = time.perf_counter(); c.request("GET", f"/schemas/ids/{sid}"); r = c.getresponse(); r.read()
    lat.append(time.perf_counter() - t)
    assert r.status == 200
print(f"lookup by id: p50 {pct(lat, .5):.3f} ms  p99 {pct(lat, .99):.3f} ms  (5000 requests)")
lat = []
for i in range(200):
    fields = [{"name": f"f{j}", "type": "string", "default": ""} for j in range(i + 1)]
    body = json.dumps({"schema": json.dumps({"type": "record", "name": "E", "fields": fields})})
    t = time.perf_counter()
    c.request("POST", "/subjects/evolving-value/versions", body, {"Content-Type": "application/json"})
    r = c.getresponse(); r.read()
    lat.append(time.perf_counter() - t)
    assert r.status == 200, r.status
print(f"registration: p50 {pct(lat, .5):.3f} ms  p99 {pct(lat, .99):.3f} ms  (200 new versions, one broker)")
PY
