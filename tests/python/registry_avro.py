"""confluent-kafka's schema-registry client and Avro serializers (Confluent's own, not
ours) against Strata's registry and broker.

usage: registry_avro.py BOOTSTRAP REGISTRY_URL TOPIC

Produces ten records with AvroSerializer (which registers the value schema), consumes
and decodes them with AvroDeserializer, then exercises the registry: an incompatible
version (409), a compatible one, lookups, compatibility checks, soft and permanent
deletes. Prints a JSON summary of what each step answered.
"""

import json
import sys
import warnings

warnings.simplefilter("ignore")

from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer  # noqa: E402
from confluent_kafka.schema_registry.error import SchemaRegistryError  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

bootstrap, url, topic = sys.argv[1:4]
subject = f"{topic}-value"
V1 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}, {"name": "n", "type": "int"}]}
V2 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}, {"name": "n", "type": "int"}, {"name": "email", "type": "string", "default": ""}]}
BAD = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}, {"name": "n", "type": "int"}, {"name": "age", "type": "int"}]}

client = SchemaRegistryClient({"url": url})
out = {}

serializer = AvroSerializer(client, json.dumps(V1))
producer = Producer({"bootstrap.servers": bootstrap})
for i in range(10):
    value = serializer({"name": f"user{i}", "n": i}, SerializationContext(topic, MessageField.VALUE))
    producer.produce(topic, value=value)
producer.flush(30)

deserializer = AvroDeserializer(client)
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "registry-test", "auto.offset.reset": "earliest"})
consumer.subscribe([topic])
decoded = []
while len(decoded) < 10:
    m = consumer.poll(30)
    if m is None:
        break
    if m.error():
        continue
    decoded.append(deserializer(m.value(), SerializationContext(topic, MessageField.VALUE)))
consumer.close()
out["decoded"] = decoded
out["magic_byte"] = value[0]

latest = client.get_latest_version(subject)
out["v1"] = {"id": latest.schema_id, "version": latest.version}

try:
    client.register_schema(subject, Schema(json.dumps(BAD), "AVRO"))
    out["incompatible"] = "accepted"
except SchemaRegistryError as e:
    out["incompatible"] = {"status": e.http_status_code, "code": e.error_code}
out["test_bad"] = client.test_compatibility(subject, Schema(json.dumps(BAD), "AVRO"))
out["test_good"] = client.test_compatibility(subject, Schema(json.dumps(V2), "AVRO"))
v2_id = client.register_schema(subject, Schema(json.dumps(V2), "AVRO"))
out["v2_id"] = v2_id
out["versions"] = client.get_versions(subject)
found = client.lookup_schema(subject, Schema(json.dumps(V1, indent=2), "AVRO"))
out["lookup_v1"] = {"id": found.schema_id, "version": found.version}
out["by_id"] = json.loads(client.get_schema(v2_id).schema_str)["fields"][2]["name"]
out["subjects"] = client.get_subjects()

# The same schema under another subject keeps its id.
out["other_subject_id"] = client.register_schema("other-value", Schema(json.dumps(V1), "AVRO"))

# Soft delete, then permanent.
out["soft_deleted"] = client.delete_subject("other-value")
out["subjects_after_soft"] = client.get_subjects()
out["subjects_with_deleted"] = client.get_subjects(deleted=True)
try:
    client.get_latest_version("other-value")
    out["soft_deleted_latest"] = "found"
except SchemaRegistryError as e:
    out["soft_deleted_latest"] = {"status": e.http_status_code, "code": e.error_code}
out["permanently_deleted"] = client.delete_subject("other-value", permanent=True)
out["subjects_with_deleted_after"] = client.get_subjects(deleted=True)

try:
    client.register_schema(subject, Schema('{"type":"record","name":"X"}', "AVRO"))
    out["invalid"] = "accepted"
except SchemaRegistryError as e:
    out["invalid"] = {"status": e.http_status_code, "code": e.error_code}

print(json.dumps(out))
