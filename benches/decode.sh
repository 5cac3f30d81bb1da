#!/usr/bin/env bash
# Issue 14's figure: produce throughput (and broker CPU per GB) of this build against the
# build before the bounded decoder, on one broker, in one run, alternating the two builds
# so the machine's noise falls on both (read the ratio, not the absolutes).
# Usage: benches/decode.sh OLD_STRATA_BINARY [seconds per run, default 15] [rounds, default 3]
#   (after cargo build --release -p strata -p strata-benches; build the old binary from
#   1122144, e.g. git worktree add /tmp/strata-before 1122144 && cd /tmp/strata-before &&
#   cargo build --release -p strata)
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: benches/decode.sh OLD_STRATA_BINARY [seconds] [rounds]}
SECS=${2:-15}
ROUNDS=${3:-3}
PARTS=${PARTS:-6}
# PIN=1: the broker on CPU 0, the load generator on CPU 1 (less scheduler noise).
BROKER_CPU=(); LG_CPU=()
if [ -n "${PIN:-}" ]; then BROKER_CPU=(taskset -c 0); LG_CPU=(taskset -c 1); fi
NEW=target/release/strata
LG=target/release/strata-benches
[ -x "$NEW" ] && [ -x "$LG" ] || { echo "build first: cargo build --release -p strata -p strata-benches" >&2; exit 1; }
[ -x "$OLD" ] || { echo "$OLD is not an executable strata binary" >&2; exit 1; }
DIR=$(mktemp -d /tmp/strata-decode-bench.XXXXXX)
PID=
cleanup() { [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT

run() { # name binary round
  local d="$DIR/$1-$3"
  "${BROKER_CPU[@]}" "$2" serve --data-dir "$d" --kafka-addr 127.0.0.1:29192 --http-addr 127.0.0.1:0 \
    --controller-addr 127.0.0.1:29193 --object-store "file://$d-cold" >"$d.out" 2>"$d.err" &
  PID=$!
  for _ in $(seq 200); do grep -q "strata listening" "$d.out" 2>/dev/null && break; sleep 0.1; done
  grep -q "strata listening" "$d.out" || { echo "$1 did not start" >&2; cat "$d.err" >&2; exit 1; }
  "$NEW" topic create bench --partitions "$PARTS" --config retention.bytes=2147483648 \
    --bootstrap 127.0.0.1:29192 >/dev/null
  "${LG_CPU[@]}" "$LG" produce --bootstrap 127.0.0.1:29192 --topic bench --acks 1 --duration "${SECS}s" \
    --broker-pid "$PID" --no-progress | grep '^RESULT' | sed 's/^RESULT //' >>"$DIR/$1.json"
  kill -9 "$PID"; wait "$PID" 2>/dev/null || true; PID=
  rm -rf "$d" "$d-cold"
}

for r in $(seq "$ROUNDS"); do
  echo "== round $r/$ROUNDS (${SECS}s each)"
  if [ $((r % 2)) -eq 1 ]; then run old "$OLD" "$r"; run new "$NEW" "$r"; else run new "$NEW" "$r"; run old "$OLD" "$r"; fi
done

python3 - "$DIR/old.json" "$DIR/new.json" <<'PY'
import json, statistics, sys
def load(p):
    return [json.loads(l) for l in open(p) if l.strip()]
old, new = load(sys.argv[1]), load(sys.argv[2])
def med(rs, k):
    v = [r[k] for r in rs if r.get(k) is not None]
    return statistics.median(v) if v else float("nan")
for name, rs in (("before (1122144)", old), ("bounded decoder", new)):
    print(f"{name:18} records/s {[round(r['records_per_s']) for r in rs]}  "
          f"median MB/s {med(rs, 'mb_per_s'):.1f}  broker CPU s/GB {med(rs, 'broker_cpu_s_per_gb'):.2f}  "
          f"errors {sum(r['errors'] for r in rs)}")
print(f"throughput ratio (median new / median old): {med(new, 'records_per_s') / med(old, 'records_per_s'):.3f}")
print(f"broker CPU per GB ratio (new / old):        {med(new, 'broker_cpu_s_per_gb') / med(old, 'broker_cpu_s_per_gb'):.3f}")
PY
