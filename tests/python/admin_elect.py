"""kafka-python's admin client (independent of librdkafka): ElectLeaders (KIP-460).

usage: admin_elect.py BOOTSTRAP preferred|unclean TOPIC PARTITION...

Prints {"TOPIC/PARTITION": error code, ...} from the broker's answer (0: elected).
"""

import json
import sys

from kafka import KafkaAdminClient

bootstrap, kind, topic = sys.argv[1:4]
partitions = [int(p) for p in sys.argv[4:]]
admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
response = admin.elect_leaders(0 if kind == "preferred" else 1, {topic: partitions},
                               raise_errors=False)
admin.close()
out = {}
for result in response.replica_election_results:
    t, parts = (result[0], result[1]) if isinstance(result, tuple) else (result.topic, result.partition_result)
    for p in parts:
        pid, code = (p[0], p[1]) if isinstance(p, tuple) else (p.partition_id, p.error_code)
        out[f"{t}/{pid}"] = code
print(json.dumps(out))
