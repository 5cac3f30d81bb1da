"""Broker-side schema validation (confluent.value.schema.validation) as clients see it.

usage: registry_validation.py BOOTSTRAP REGISTRY_URL TOPIC

confluent-kafka's AvroSerializer registers TOPIC-value's schema and produces three
records (accepted). Then kafka-python (Produce v8+, KIP-467) sends one batch of four
values: one under the registered id, one under an id not registered for the subject,
one without Confluent's header, and a null value. Prints a JSON summary: the Avro
deliveries, the registered id, and per record of the batch whether it was accepted and
the error the producer reported.
"""

import json
import sys
import warnings

warnings.simplefilter("ignore")

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroSerializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402
from kafka import KafkaProducer  # noqa: E402

bootstrap, url, topic = sys.argv[1:4]
SCHEMA = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}

client = SchemaRegistryClient({"url": url})
serializer = AvroSerializer(client, json.dumps(SCHEMA))
producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
delivered = []
for i in range(3):
    value = serializer({"id": i}, SerializationContext(topic, MessageField.VALUE))
    producer.produce(topic, value=value, on_delivery=lambda err, msg: delivered.append(err is None and msg.error() is None))
producer.flush(30)
schema_id = client.get_latest_version(f"{topic}-value").schema_id

payload = b"\x02"  # the Avro long 1
values = [
    b"\x00" + schema_id.to_bytes(4, "big") + payload,
    b"\x00" + (schema_id + 1000).to_bytes(4, "big") + payload,
    b"plain bytes",
    None,
]
raw = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=1000, retries=0, acks="all")
futures = [raw.send(topic, key=b"k", value=v, partition=0) for v in values]
raw.flush()
batch = []
for f in futures:
    try:
        f.get(timeout=30)
        batch.append({"ok": True, "error": ""})
    except Exception as e:  # noqa: BLE001 - the application's view is what we print
        batch.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
# The good records alone, sent again, are taken.
again = [raw.send(topic, key=b"k", value=v, partition=0) for v in (values[0], values[3])]
raw.flush()
resent = []
for f in again:
    try:
        f.get(timeout=30)
        resent.append(True)
    except Exception:  # noqa: BLE001
        resent.append(False)
raw.close()
print(json.dumps({"delivered": delivered, "schema_id": schema_id, "batch": batch, "resent": resent}))
