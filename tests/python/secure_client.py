"""kafka-python over a secured listener: admin, produce, consume in a group.

Usage: python3 secure_client.py HOST:PORT TOPIC 'JSON of KafkaClient security kwargs' [expect-failure]

With expect-failure, the first call must fail with an authentication or connection
error (and the script exits 0 when it does); otherwise every step must succeed.
"""
import json
import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import KafkaConfigurationError, KafkaError

bootstrap, topic, security = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
expect_failure = len(sys.argv) > 4 and sys.argv[4] == "expect-failure"

# OAUTHBEARER: the test hands over a ready token (signed, unsigned or expired).
if "oauth_token" in security:
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class FixedToken(AbstractTokenProvider):
        def __init__(self, token):
            self._token = token

        def token(self):
            return self._token

    security["sasl_oauth_token_provider"] = FixedToken(security.pop("oauth_token"))

if expect_failure:
    # kafka-python logs an authentication failure and retries until its bootstrap
    # timeout: the log says why, the exception only that it gave up.
    import logging

    class Seen(logging.Handler):
        messages = []

        def emit(self, record):
            self.messages.append(record.getMessage())

    seen = Seen()
    logging.getLogger("kafka").addHandler(seen)
    logging.getLogger("kafka").setLevel(logging.DEBUG)
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000,
                                 bootstrap_timeout_ms=8000, **security)
        admin.list_topics()
    except KafkaConfigurationError:
        raise  # the test's mistake, not the broker's refusal
    except (KafkaError, OSError) as e:
        why = [m for m in seen.messages
               if "AuthenticationFailed" in m or "Authentication failed" in m
               or "SSLError" in m or "certificate" in m.lower() or "expired" in m
               or "alert" in m.lower()]
        if not why:
            print(f"kafka-python failed, but not with an authentication error: {e}")
            sys.exit(1)
        print(f"kafka-python refused as expected: {why[0][:300]}")
        sys.exit(0)
    print("kafka-python: expected an authentication failure, got none")
    sys.exit(1)

admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000, **security)
admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
assert topic in admin.list_topics(), "created topic is listed"

producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, **security)
futures = [producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode()) for i in range(200)]
producer.flush(30)
for f in futures:
    f.get(timeout=30)
producer.close()

consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"{topic}-group",
                         auto_offset_reset="earliest", enable_auto_commit=True,
                         consumer_timeout_ms=2000, **security)
seen = set()
deadline = time.time() + 60
while len(seen) < 200 and time.time() < deadline:
    for _, records in consumer.poll(timeout_ms=1000).items():
        for r in records:
            seen.add(r.value)
consumer.commit()
consumer.close()
assert len(seen) == 200, f"consumed {len(seen)} of 200"
offsets = admin.list_group_offsets(f"{topic}-group")[f"{topic}-group"]
committed = sum(o.offset for o in offsets.values())
assert committed == 200, f"the group committed {committed} of 200: {offsets}"
admin.close()
print(f"kafka-python OK: 200 records over {security.get('security_protocol')}")
