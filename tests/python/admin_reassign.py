"""kafka-python's admin client (independent of librdkafka): AlterPartitionReassignments
and ListPartitionReassignments (KIP-455).

usage: admin_reassign.py BOOTSTRAP alter TOPIC PARTITION BROKERS|cancel
       admin_reassign.py BOOTSTRAP list

alter prints {"TOPIC/PARTITION": error name or null}; list prints
{"TOPIC/PARTITION": {"replicas": [...], "adding": [...], "removing": [...]}}.
"""

import json
import sys

from kafka import KafkaAdminClient, TopicPartition

bootstrap, action = sys.argv[1:3]
admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
out = {}
if action == "alter":
    topic, partition, brokers = sys.argv[3], int(sys.argv[4]), sys.argv[5]
    target = None if brokers == "cancel" else [int(b) for b in brokers.split(",")]
    result = admin.alter_partition_reassignments({TopicPartition(topic, partition): target})
    for tp, err in result.items():
        out[f"{tp.topic}/{tp.partition}"] = None if err is None else err.__name__
else:
    for tp, r in admin.list_partition_reassignments().items():
        out[f"{tp.topic}/{tp.partition}"] = {
            "replicas": r["replicas"],
            "adding": r["adding_replicas"],
            "removing": r["removing_replicas"],
        }
admin.close()
print(json.dumps(out))
