"""confluent-kafka's ProtobufSerializer and ProtobufDeserializer (Confluent's own, not
ours) against Strata's registry and broker, with a reference between two .proto files.

usage: registry_protobuf.py BOOTSTRAP REGISTRY_URL TOPIC

The message classes are built at run time from descriptors (no protoc here): shop/order.proto
imports shop/address.proto. The serializer registers both (address.proto under its own
subject, as Confluent's reference subject strategy names it) and produces five Orders;
the deserializer decodes them. Then an incompatible change (a field's type) is refused
with 409, and the subject is soft-deleted. Prints a JSON summary.
"""

import json
import sys
import warnings

warnings.simplefilter("ignore")

from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.error import SchemaRegistryError  # noqa: E402
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: E402

bootstrap, url, topic = sys.argv[1:4]
subject = f"{topic}-value"
F = descriptor_pb2.FieldDescriptorProto

address = descriptor_pb2.FileDescriptorProto(name="shop/address.proto", package="shop", syntax="proto3")
m = address.message_type.add(name="Address")
m.field.add(name="city", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)

order = descriptor_pb2.FileDescriptorProto(
    name="shop/order.proto", package="shop", syntax="proto3", dependency=["shop/address.proto"]
)
m = order.message_type.add(name="Order")
m.field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
m.field.add(name="item", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
m.field.add(name="ship_to", number=3, type=F.TYPE_MESSAGE, type_name=".shop.Address", label=F.LABEL_OPTIONAL)
m.field.add(name="tags", number=4, type=F.TYPE_STRING, label=F.LABEL_REPEATED)

pool = descriptor_pool.Default()
pool.Add(address)
pool.Add(order)
Order = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))
Address = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Address"))

client = SchemaRegistryClient({"url": url})
out = {}
serializer = ProtobufSerializer(Order, client, {"use.deprecated.format": False})
producer = Producer({"bootstrap.servers": bootstrap})
for i in range(5):
    msg = Order(id=i, item=f"item{i}", ship_to=Address(city=f"city{i}"), tags=["a", f"t{i}"])
    value = serializer(msg, SerializationContext(topic, MessageField.VALUE))
    producer.produce(topic, value=value)
producer.flush(30)
out["magic_byte"] = value[0]
# Confluent's message indexes follow the id: [0] (the first message) is one 0 byte.
out["index_byte"] = value[5]

deserializer = ProtobufDeserializer(Order, {"use.deprecated.format": False})
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "registry-proto", "auto.offset.reset": "earliest"})
consumer.subscribe([topic])
decoded = []
while len(decoded) < 5:
    m = consumer.poll(30)
    if m is None:
        break
    if m.error():
        continue
    o = deserializer(m.value(), SerializationContext(topic, MessageField.VALUE))
    decoded.append({"id": o.id, "item": o.item, "city": o.ship_to.city, "tags": list(o.tags)})
consumer.close()
out["decoded"] = decoded

out["subjects"] = sorted(client.get_subjects())
latest = client.get_latest_version(subject)
out["references"] = [{"name": r.name, "subject": r.subject, "version": r.version} for r in latest.schema.references]
out["schema_type"] = latest.schema.schema_type
out["text_has_message"] = "message Order" in latest.schema.schema_str

# The same schema as .proto text: found as the version the serializer registered.
ORDER_TEXT = """syntax = "proto3";
package shop;
import "shop/address.proto";
message Order {
  int64 id = 1;
  string item = 2;
  Address ship_to = 3;
  repeated string tags = 4;
}
"""
refs = latest.schema.references
found = client.lookup_schema(subject, Schema(ORDER_TEXT, "PROTOBUF", refs))
out["lookup_text"] = {"id": found.schema_id, "version": found.version}
out["v1_id"] = latest.schema_id

# Changing a field's type (int64 -> string) breaks the wire format: 409.
BAD = ORDER_TEXT.replace("int64 id = 1;", "string id = 1;")
try:
    client.register_schema(subject, Schema(BAD, "PROTOBUF", refs))
    out["incompatible"] = "accepted"
except SchemaRegistryError as e:
    out["incompatible"] = {"status": e.http_status_code, "code": e.error_code}
# Adding a field is compatible.
GOOD = ORDER_TEXT.replace("repeated string tags = 4;", "repeated string tags = 4;\n  int32 qty = 5;")
out["v2_id"] = client.register_schema(subject, Schema(GOOD, "PROTOBUF", refs))
out["versions"] = client.get_versions(subject)
out["soft_deleted"] = client.delete_subject(subject)
out["subjects_after"] = sorted(client.get_subjects())
print(json.dumps(out))
