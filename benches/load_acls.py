"""Creates N ACLs on a broker through kafka-python's admin client, in batches (for
benches/security.sh). A realistic mix: literal and prefixed topic ACLs for many users,
group ACLs; none of them applies to the bench's producer.

Usage: python3 load_acls.py HOST:PORT CA_FILE COUNT   (SASL_SSL as admin:admin-secret)
"""
import sys

from kafka.admin import (ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                         KafkaAdminClient,
                         ResourcePattern, ResourceType)

bootstrap, ca, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
admin = KafkaAdminClient(bootstrap_servers=bootstrap, security_protocol="SASL_SSL",
                         ssl_cafile=ca, sasl_mechanism="SCRAM-SHA-512",
                         sasl_plain_username="admin", sasl_plain_password="admin-secret",
                         request_timeout_ms=60000)
acls = []
for i in range(count):
    user = f"User:user-{i % 1000}"
    kind = i % 10
    if kind < 5:
        r = ResourcePattern(ResourceType.TOPIC, f"topic-{i}", ACLResourcePatternType.LITERAL)
    elif kind < 8:
        r = ResourcePattern(ResourceType.TOPIC, f"team-{i}-", ACLResourcePatternType.PREFIXED)
    else:
        r = ResourcePattern(ResourceType.GROUP, f"group-{i}", ACLResourcePatternType.LITERAL)
    op = ACLOperation.WRITE if i % 2 else ACLOperation.READ
    acls.append(ACL(user, "*", op, ACLPermissionType.ALLOW, r))
for start in range(0, len(acls), 1000):
    result = admin.create_acls(acls[start:start + 1000])
    if result["failed"]:
        sys.exit(f"failed: {result['failed'][:3]}")
print(f"created {count} ACLs", file=sys.stderr)
