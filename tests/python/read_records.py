"""Reads one partition of a topic from its beginning to its end offset with kafka-python
(a pure-Python Kafka client, independent of librdkafka) and prints every record as one
JSON line: [offset, key, value, timestamp, headers], keys, values and header values as
UTF-8 text (null for a missing one), headers as [name, value] pairs.

Usage: python3 read_records.py HOST:PORT TOPIC PARTITION
"""
import json
import sys

from kafka import KafkaConsumer, TopicPartition

bootstrap, topic, partition = sys.argv[1], sys.argv[2], int(sys.argv[3])
tp = TopicPartition(topic, partition)
consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", consumer_timeout_ms=10000,
                         max_partition_fetch_bytes=256 << 10)
consumer.assign([tp])
consumer.seek_to_beginning(tp)
end = consumer.end_offsets([tp])[tp]


def text(b):
    return None if b is None else b.decode()


out = sys.stdout
while consumer.position(tp) < end:
    batch = consumer.poll(timeout_ms=5000)
    if not batch:
        sys.exit(f"no records at position {consumer.position(tp)} before the end {end}")
    for records in batch.values():
        for r in records:
            headers = [[k, text(v)] for k, v in r.headers]
            out.write(json.dumps([r.offset, text(r.key), text(r.value), r.timestamp, headers]) + "\n")
consumer.close()
