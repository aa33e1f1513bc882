"""Make `lone_node_v1.tar.gz`: the data directory of a lone node written by the release that kept a lone
node's metadata in a local log (LocalControllerChannel, before the lone node ran Raft as its only voter).

It was run once, on that release (commit 2e90b6e, put first on PYTHONPATH as the `odradek` package), and its
output is committed beside it; running it on a later release makes a directory of that release instead,
which is not what the upgrade test needs.

    python tests/vectors/lone_node_v1/make_fixture.py tests/vectors/lone_node_v1/lone_node_v1.tar.gz

What the directory holds (tests/integration/test_lone_node_upgrade.py checks each):
* topic `orders` (3 partitions, retention.ms=3600000 and cleanup.policy=delete as overrides), topic `audit`
  (1 partition, no override);
* 10 records in orders-0 (b"order-0" .. b"order-9", key b"k"), 5 in audit-0 (b"audit-0" .. b"audit-4");
* group `billing` with committed offsets orders-0 -> 7, audit-0 -> 3;
* SCRAM-SHA-256 user `alice` (password alice-secret, 4096 iterations);
* ACL: User:alice may READ topic `orders` (literal), from any host (the broker ran with StandardAuthorizer
  and super.users=User:ANONYMOUS: `SECURITY`);
* client quota: user `alice`, producer_byte_rate 1048576.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tarfile
import tempfile

from odradek.broker.testing import running_broker
from odradek.client.admin import Admin, AclBinding, NewTopic
from odradek.client.producer import Producer
from odradek.storage.names import TopicPartition


# ACLs need the authorizer on; the client (no SASL) is User:ANONYMOUS, a super user here.
SECURITY = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS"}


async def write(data_dir: str) -> None:
    async with running_broker(data_dir, node_id=1, **SECURITY) as running:
        bootstrap = f"{running.host}:{running.port}"
        async with Admin(bootstrap_servers=bootstrap) as admin:
            await admin.create_topics([
                NewTopic("orders", 3, 1, {"retention.ms": "3600000", "cleanup.policy": "delete"}),
                NewTopic("audit", 1, 1),
            ])
            async with Producer(bootstrap_servers=bootstrap) as producer:
                for i in range(10):
                    await producer.send_and_wait("orders", f"order-{i}".encode(), key=b"k", partition=0)
                for i in range(5):
                    await producer.send_and_wait("audit", f"audit-{i}".encode(), partition=0)
            await admin.reset_group_offsets("billing", [TopicPartition("orders", 0)], to="offset", offset=7)
            await admin.reset_group_offsets("billing", [TopicPartition("audit", 0)], to="offset", offset=3)
            await admin.alter_user_scram_credentials(upsert=[("alice", "SCRAM-SHA-256", "alice-secret", 4096)])
            errors = await admin.create_acls([AclBinding("topic", "orders", "literal", "User:alice", "*", "read", "allow")])
            assert errors == [None], errors
            await admin.alter_client_quotas({"user": "alice"}, {"producer_byte_rate": 1048576})


def pack(data_dir: str, out: str) -> None:
    """The directory as a .tar.gz; preallocated index files are mostly zeros and compress to nothing."""
    with tarfile.open(out, "w:gz", compresslevel=9) as tar:
        for root, dirs, files in os.walk(data_dir):
            dirs.sort()
            for name in sorted(files):
                if name == ".lock":
                    continue
                path = os.path.join(root, name)
                tar.add(path, arcname=os.path.relpath(path, data_dir))


def main(out: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = os.path.join(tmp, "data")
        asyncio.run(write(data_dir))
        pack(data_dir, out)


if __name__ == "__main__":
    main(sys.argv[1])
