"""kafka-python's admin client (independent of librdkafka): DescribeConfigs.

usage: admin_configs.py BOOTSTRAP broker|topic NAME

Prints {"KEY": value, ...}: every key, as the broker describes the resource.
"""

import json
import sys

from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

bootstrap, kind, name = sys.argv[1:4]
admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
kind = ConfigResourceType.BROKER if kind == "broker" else ConfigResourceType.TOPIC
result = admin.describe_configs([ConfigResource(kind, name)], config_filter="all")
admin.close()
out = {}
for by_name in result.values():
    for configs in by_name.values():
        for key, data in configs.items():
            out[key] = data.get("value") if isinstance(data, dict) else data
print(json.dumps(out))
