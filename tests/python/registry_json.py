"""confluent-kafka's JSONSerializer and JSONDeserializer (Confluent's own, not ours)
against Strata's registry and broker.

usage: registry_json.py BOOTSTRAP REGISTRY_URL TOPIC

Produces five objects with JSONSerializer (which registers the schema and validates each
object against it: one that does not fit is refused before it is sent), consumes and
decodes them with JSONDeserializer, then registers an incompatible change (409) and a
compatible one. Prints a JSON summary.
"""

import json
import sys
import warnings

warnings.simplefilter("ignore")

from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.error import SchemaRegistryError  # noqa: E402
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

bootstrap, url, topic = sys.argv[1:4]
subject = f"{topic}-value"
V1 = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order",
    "type": "object",
    "properties": {"id": {"type": "integer"}, "item": {"type": "string"}},
    "required": ["id"],
    # A closed content model: as in Confluent's registry, adding a property to an open
    # one is not BACKWARD compatible (old data may hold it with any value).
    "additionalProperties": False,
}

client = SchemaRegistryClient({"url": url})
out = {}
serializer = JSONSerializer(json.dumps(V1), client)
producer = Producer({"bootstrap.servers": bootstrap})
for i in range(5):
    value = serializer({"id": i, "item": f"item{i}"}, SerializationContext(topic, MessageField.VALUE))
    producer.produce(topic, value=value)
producer.flush(30)
out["magic_byte"] = value[0]
try:
    serializer({"id": "not a number"}, SerializationContext(topic, MessageField.VALUE))
    out["invalid_object"] = "serialized"
except Exception as e:  # noqa: BLE001
    out["invalid_object"] = type(e).__name__

deserializer = JSONDeserializer(json.dumps(V1), schema_registry_client=client)
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "registry-json", "auto.offset.reset": "earliest"})
consumer.subscribe([topic])
decoded = []
while len(decoded) < 5:
    m = consumer.poll(30)
    if m is None:
        break
    if m.error():
        continue
    decoded.append(deserializer(m.value(), SerializationContext(topic, MessageField.VALUE)))
consumer.close()
out["decoded"] = decoded
latest = client.get_latest_version(subject)
out["v1"] = {"id": latest.schema_id, "version": latest.version, "type": latest.schema.schema_type}

# id: integer -> string narrows what is accepted: a reader of the new schema cannot
# read old data (BACKWARD): 409.
BAD = json.loads(json.dumps(V1))
BAD["properties"]["id"] = {"type": "string"}
try:
    client.register_schema(subject, Schema(json.dumps(BAD), "JSON"))
    out["incompatible"] = "accepted"
except SchemaRegistryError as e:
    out["incompatible"] = {"status": e.http_status_code, "code": e.error_code}
# An optional property added to a closed content model: compatible.
GOOD = json.loads(json.dumps(V1))
GOOD["properties"]["qty"] = {"type": "integer"}
out["v2_id"] = client.register_schema(subject, Schema(json.dumps(GOOD), "JSON"))
out["versions"] = client.get_versions(subject)
print(json.dumps(out))
