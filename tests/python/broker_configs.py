"""kafka-python's admin client (independent of librdkafka): AlterConfigs on a broker.

usage: broker_configs.py BOOTSTRAP BROKER_ID KEY=VALUE...

Sets the broker's dynamic configs (an empty BROKER_ID is the cluster-wide default).
Prints {"error_code": int, "error_message": str}, the broker's answer for the resource.
"""

import json
import sys

from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

bootstrap, broker = sys.argv[1:3]
configs = dict(arg.split("=", 1) for arg in sys.argv[3:])
admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
try:
    # The broker decides what it takes (not the client's list of Kafka's keys).
    result = admin.alter_configs(
        [ConfigResource(ConfigResourceType.BROKER, broker, configs=configs)],
        raise_on_unknown=False,
    )
except Exception as e:  # noqa: BLE001 - a refusal may come back raised
    print(json.dumps({"error_code": getattr(e, "errno", -1) or -1, "error_message": str(e)}))
    sys.exit(0)
finally:
    admin.close()
out = {"error_code": 0, "error_message": ""}
for by_name in result.values():
    for v in by_name.values():
        # kafka-python gives a refusal as "[Error N] Name: message".
        text = str(v) if v is not None else ""
        if isinstance(v, Exception) or text.startswith("[Error "):
            code = text[len("[Error "):].split("]", 1)[0]
            out = {"error_code": int(code) if code.isdigit() else -1, "error_message": text}
print(json.dumps(out))
