"""kafka-python (independent of librdkafka) on a topic's compression.type.

usage: compression.py BOOTSTRAP TOPIC alter KEY=VALUE...
       compression.py BOOTSTRAP TOPIC consume N

alter: sets the topic's configs with AlterConfigs (the given ones replace every
override) and prints {"result": kafka-python's answer, {"topic": {TOPIC: "OK" or why}}}.
consume: reads partition 0's first N records from offset 0 and prints
{"values": [value as text, ...]}.
"""

import json
import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType

bootstrap, topic, what = sys.argv[1:4]
if what == "alter":
    configs = dict(arg.split("=", 1) for arg in sys.argv[4:])
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    result = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs=configs)])
    admin.close()
    print(json.dumps({"result": result}, default=str))
else:
    n = int(sys.argv[4])
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    values = []
    deadline = time.time() + 60
    while len(values) < n and time.time() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            values.extend(r.value.decode() for r in records)
    consumer.close()
    print(json.dumps({"values": values[:n]}))
