"""Reads every partition of a topic from its beginning with kafka-python (a pure-Python
Kafka client, independent of librdkafka; it fetches through KIP-227 incremental fetch
sessions when the broker offers them) until COUNT records arrived, and prints each as one
JSON line: [partition, offset, value] (the value as UTF-8 text).

Usage: python3 consume_all.py HOST:PORT TOPIC COUNT
"""
import json
import sys
import time

from kafka import KafkaConsumer, TopicPartition

bootstrap, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", enable_incremental_fetch_sessions=True,
                         max_partition_fetch_bytes=4096, fetch_max_wait_ms=200)
deadline = time.time() + 120
partitions = None
while not partitions:
    partitions = consumer.partitions_for_topic(topic)
    if time.time() > deadline:
        sys.exit(f"no metadata for {topic}")
tps = [TopicPartition(topic, p) for p in sorted(partitions)]
consumer.assign(tps)
consumer.seek_to_beginning(*tps)
got = 0
out = sys.stdout
while got < count:
    if time.time() > deadline:
        sys.exit(f"only {got} of {count} records in time")
    for records in consumer.poll(timeout_ms=1000).values():
        for r in records:
            out.write(json.dumps([r.partition, r.offset, r.value.decode()]) + "\n")
            got += 1
consumer.close()
