"""kafka-python (a pure-Python Kafka client) against a running Strata broker.

Usage: python3 kafka_python_smoke.py HOST:PORT
Exits non-zero with a message on the first mismatch.
"""
import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

bootstrap = sys.argv[1]
topic = "py-smoke"

admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1,
                              topic_configs={"retention.ms": "3600000"})])
assert topic in admin.list_topics(), "created topic is listed"
configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
text = repr(configs)
assert "retention.ms" in text and "3600000" in text, text

for codec in (None, "gzip", "lz4", "snappy", "zstd"):
    # The codecs' Python modules are installed by scripts/deps; a missing one fails here.
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type=codec,
                             linger_ms=5, enable_idempotence=True)
    futures = [producer.send(topic, key=f"k{i % 10}".encode(), value=f"{codec}-{i}".encode(),
                             timestamp_ms=1_700_000_000_000 + i)
               for i in range(500)]
    producer.flush(30)
    for f in futures:
        f.get(timeout=30)
    producer.close()

consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", consumer_timeout_ms=5000)
parts = [TopicPartition(topic, p) for p in range(3)]
consumer.assign(parts)
consumer.seek_to_beginning(*parts)
ends = consumer.end_offsets(parts)
total = sum(ends.values())
seen = []
deadline = time.time() + 60
while len(seen) < total and time.time() < deadline:
    for tp, records in consumer.poll(timeout_ms=1000).items():
        for r in records:
            seen.append((tp.partition, r.offset, r.key, r.value))
assert len(seen) == total, f"consumed {len(seen)} of {total}"
values = sorted(v for _, _, _, v in seen)
assert len(set(values)) == total, "no duplicates"
# Keys stay on one partition.
where = {}
for p, _, k, _ in seen:
    assert where.setdefault(k, p) == p, f"key {k} on two partitions"
# Offsets by time.
found = consumer.offsets_for_times({parts[0]: 1_700_000_000_000 + 250})
assert found[parts[0]] is not None and found[parts[0]].offset > 0, found
consumer.close()
admin.delete_topics([topic])
print(f"kafka-python OK: {total} records")
