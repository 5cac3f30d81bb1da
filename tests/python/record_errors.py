"""kafka-python (Produce v8+, KIP-467): one batch in which some records break a rule.

usage: record_errors.py BOOTSTRAP TOPIC KEYLESS_INDEXES

Sends six records as one batch (a long linger, one flush), those at KEYLESS_INDEXES
(comma-separated) without a key. Prints [{"index": i, "ok": bool, "error": str}, ...]
in send order: what the producer told the application about each record.
"""

import json
import sys

from kafka import KafkaProducer

bootstrap, topic, keyless = sys.argv[1:4]
keyless = {int(i) for i in keyless.split(",") if i}
producer = KafkaProducer(
    bootstrap_servers=bootstrap,
    linger_ms=1000,
    retries=0,
    acks="all",
)
futures = []
for i in range(6):
    key = None if i in keyless else f"k{i}".encode()
    futures.append(producer.send(topic, key=key, value=f"v{i}".encode(), partition=0))
producer.flush()
out = []
for i, f in enumerate(futures):
    try:
        f.get(timeout=30)
        out.append({"index": i, "ok": True, "error": ""})
    except Exception as e:  # noqa: BLE001 - the application's view is what we print
        out.append({"index": i, "ok": False, "error": f"{type(e).__name__}: {e}"})
producer.close()
print(json.dumps(out))
