#!/usr/bin/env bash
# Security figures (issue 18), in one run on this machine (read the ratios):
#   1. produce and consume over SASL_SSL (SCRAM-SHA-512, TLS 1.3 with AES-GCM) vs
#      PLAINTEXT, on one broker with both listeners, alternating, ROUNDS rounds;
#   2. produce with the authorizer on and 10,000 ACLs loaded vs none (the producer's
#      principal allowed by a prefixed ACL in both), alternating.
# Usage: benches/security.sh [seconds per run, default 15] [rounds, default 3]
#   (after cargo build --release -p strata -p strata-benches)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-15}
ROUNDS=${2:-3}
BIN=target/release/strata
LG=target/release/strata-benches
[ -x "$BIN" ] && [ -x "$LG" ] || { echo "build first: cargo build --release -p strata -p strata-benches" >&2; exit 1; }
DIR=$(mktemp -d /tmp/strata-security-bench.XXXXXX)
PID=
cleanup() { [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$DIR"; }
trap cleanup EXIT

# A CA and a server certificate for 127.0.0.1 (openssl, as an operator would).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=bench CA" \
  -keyout "$DIR/ca.key" -out "$DIR/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
  -keyout "$DIR/server.key" -out "$DIR/server.csr" 2>/dev/null
printf "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n" >"$DIR/ext"
openssl x509 -req -in "$DIR/server.csr" -CA "$DIR/ca.pem" -CAkey "$DIR/ca.key" -CAcreateserial \
  -days 2 -extfile "$DIR/ext" -out "$DIR/server.pem" 2>/dev/null

start() { # data-dir, extra flags...
  local d=$1; shift
  "$BIN" serve --node-id 1 --data-dir "$DIR/$d" --kafka-addr 127.0.0.1:29292 --http-addr 127.0.0.1:0 \
    --controller-addr 127.0.0.1:29293 --controller-voters 1@127.0.0.1:29293 \
    --object-store "file://$DIR/cold-$d" --listeners SASL_SSL://127.0.0.1:29294 \
    --retention-check-interval 1s \
    --tls-cert "$DIR/server.pem" --tls-key "$DIR/server.key" \
    --sasl-mechanisms SCRAM-SHA-512 --bootstrap-user admin:admin-secret "$@" \
    >"$DIR/$d.out" 2>"$DIR/$d.err" &
  PID=$!
  for _ in $(seq 200); do grep -q "strata listening" "$DIR/$d.out" && return; sleep 0.1; done
  echo "the broker did not start" >&2; cat "$DIR/$d.err" >&2; exit 1
}
stop() { kill "$PID"; wait "$PID" 2>/dev/null || true; PID=; }
SASL=(--client-property security.protocol=sasl_ssl --client-property "ssl.ca.location=$DIR/ca.pem"
      --client-property sasl.mechanisms=SCRAM-SHA-512 --client-property sasl.username=admin
      --client-property sasl.password=admin-secret)
ADMIN_CFG="$DIR/admin.properties"
printf "security.protocol=SASL_SSL\nssl.ca.location=%s\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=admin\nsasl.password=admin-secret\n" "$DIR/ca.pem" >"$ADMIN_CFG"
mbs() { python3 -c "
import sys,json
for l in sys.stdin:
  if l.startswith('RESULT'):
    d=json.loads(l[7:]); print(round(d['mb_per_s'],1), round(d.get('broker_cpu_seconds',0) or 0,2))
"; }

echo "== 1. SASL_SSL (SCRAM-SHA-512, TLS 1.3) vs PLAINTEXT, ${SECS}s each, $ROUNDS rounds"
start tls
# Bounded, so rounds of flat-out produce do not fill the disk.
BOUNDED=(--config retention.bytes=536870912 --config segment.bytes=134217728)
"$BIN" topic create sec --partitions 6 "${BOUNDED[@]}" --bootstrap 127.0.0.1:29292 >/dev/null
for r in $(seq "$ROUNDS"); do
  for mode in plain sasl_ssl; do
    if [ $mode = plain ]; then args=(--bootstrap 127.0.0.1:29292); else args=(--bootstrap 127.0.0.1:29294 "${SASL[@]}"); fi
    p=$("$LG" produce "${args[@]}" --topic sec --acks all --idempotent --duration "${SECS}s" --broker-pid "$PID" --no-progress | mbs)
    c=$("$LG" consume "${args[@]}" --topic sec --broker-pid "$PID" --no-progress | mbs)
    echo "round $r $mode produce MB/s,broker-cpu: $p  consume MB/s,broker-cpu: $c"
  done
done
stop

[ -n "${ONLY_TLS:-}" ] && exit 0
echo "== 2. authorizer on: 10,000 ACLs vs none (PLAINTEXT producer, User:ANONYMOUS allowed by a prefixed ACL)"
for r in $(seq "$ROUNDS"); do
  for acls in 0 10000; do
    rm -rf "$DIR/acl" "$DIR/cold-acl"
    start acl --authorizer on --super-users User:admin
    "$BIN" topic create bench-t --partitions 6 "${BOUNDED[@]}" --bootstrap 127.0.0.1:29294 --command-config "$ADMIN_CFG" >/dev/null
    "$BIN" acl add --allow User:ANONYMOUS --operation Write --topic bench- --prefixed \
      --bootstrap 127.0.0.1:29294 --command-config "$ADMIN_CFG" >/dev/null
    if [ "$acls" -gt 0 ]; then
      python3 benches/load_acls.py 127.0.0.1:29294 "$DIR/ca.pem" "$acls"
    fi
    p=$("$LG" produce --bootstrap 127.0.0.1:29292 --topic bench-t --acks all --idempotent --duration "${SECS}s" --broker-pid "$PID" --no-progress | mbs)
    echo "round $r acls=$acls produce MB/s,broker-cpu: $p"
    stop
  done
done
