"""Transactions with kafka-python (a pure-Python Kafka client, independent of
librdkafka): a transactional producer commits one transaction, aborts another and
leaves a third open, then a second producer with the same transactional.id fences the
first; a read_committed consumer must see exactly the committed records.

Prints one JSON object: {"committed": [...], "read_committed": [...], "fenced": bool,
"read_uncommitted": n}.

Usage: python3 transactions.py HOST:PORT TOPIC
"""
import json
import sys

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

bootstrap, topic = sys.argv[1], sys.argv[2]


def producer():
    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="py-writer",
                      enable_idempotence=True)
    p.init_transactions()
    return p


def send(p, values):
    for v in values:
        p.send(topic, key=v.encode(), value=v.encode())
    p.flush()


def read(isolation):
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", isolation_level=isolation,
                      consumer_timeout_ms=10000)
    tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic))]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    out = [m.value.decode() for m in c]
    c.close()
    return out


p = producer()
committed = [f"pc{i}" for i in range(30)]
p.begin_transaction()
send(p, committed)
p.commit_transaction()

p.begin_transaction()
send(p, [f"pa{i}" for i in range(20)])
p.abort_transaction()

# Left open, then fenced by a new producer with the same transactional.id, which
# aborts it.
p.begin_transaction()
send(p, [f"po{i}" for i in range(10)])
second = producer()
fenced = False
try:
    p.commit_transaction()
except KafkaError:
    fenced = True

second.begin_transaction()
tail = [f"pn{i}" for i in range(5)]
send(second, tail)
second.commit_transaction()

print(json.dumps({
    "committed": committed + tail,
    "read_committed": read("read_committed"),
    "read_uncommitted": len(read("read_uncommitted")),
    "fenced": fenced,
}))
