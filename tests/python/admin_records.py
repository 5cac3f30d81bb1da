"""kafka-python's admin client (an implementation independent of librdkafka) on a
partition's log directories and records.

usage: admin_records.py BOOTSTRAP TOPIC describe
       admin_records.py BOOTSTRAP TOPIC delete OFFSET

describe: prints, per log directory this broker reports, the bytes of TOPIC's partitions
({"dirs": {log_dir: {partition: bytes}}, "usable": {log_dir: usable_bytes}}).
delete: deletes the records of TOPIC's partition 0 below OFFSET and prints
{"low_watermark": N} or {"error": the error's class name}.
"""

import json
import sys

from kafka import KafkaAdminClient, TopicPartition

bootstrap, topic, what = sys.argv[1:4]
admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
if what == "describe":
    dirs, usable = {}, {}
    for broker in admin.describe_log_dirs():
        for d in broker.get("log_dirs", broker.get("results", [])):
            name = d["log_dir"]
            usable[name] = d.get("usable_bytes", -1)
            parts = dirs.setdefault(name, {})
            for t in d["topics"]:
                if t["name"] == topic:
                    for p in t["partitions"]:
                        parts[p["partition_index"]] = p["partition_size"]
    print(json.dumps({"dirs": dirs, "usable": usable}))
else:
    offset = int(sys.argv[4])
    try:
        result = admin.delete_records({TopicPartition(topic, 0): offset})
        print(json.dumps({"low_watermark": list(result.values())[0]["low_watermark"]
                          if isinstance(list(result.values())[0], dict)
                          else list(result.values())[0]}))
    except Exception as e:  # the test asserts which error
        print(json.dumps({"error": type(e).__name__, "message": str(e)}))
admin.close()
