"""kafka-python's admin client (independent of librdkafka) on consumer groups.

usage: admin_groups.py BOOTSTRAP TOPIC

A kafka-python consumer joins group "listed" on TOPIC, is assigned, and leaves; then
the admin client lists the groups and commits offsets for the group to TOPIC's
partition 0, to a partition TOPIC lacks (99), and to a topic that does not exist.
Prints {"groups": {group: protocol_type}, "commit": {"topic/partition": error name}}.
"""

import json
import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

bootstrap, topic = sys.argv[1:3]
consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="listed",
                         auto_offset_reset="earliest", enable_auto_commit=False)
deadline = time.time() + 60
while not consumer.assignment():
    if time.time() > deadline:
        sys.exit("the consumer was never assigned")
    consumer.poll(timeout_ms=500)
consumer.close()

admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
groups = {}
for g in admin.list_groups():
    if isinstance(g, dict):
        groups[g.get("group_id") or g.get("group")] = g.get("protocol_type")
    else:
        groups[g[0]] = g[1]
result = admin.alter_group_offsets("listed", {
    TopicPartition(topic, 0): OffsetAndMetadata(1, "", -1),
    TopicPartition(topic, 99): OffsetAndMetadata(1, "", -1),
    TopicPartition("missing", 0): OffsetAndMetadata(5, "", -1),
})
commit = {f"{tp.topic}/{tp.partition}": getattr(e, "__name__", str(e)) for tp, e in result.items()}
admin.close()
print(json.dumps({"groups": groups, "commit": commit}))
