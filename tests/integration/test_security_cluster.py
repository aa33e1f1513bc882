"""Three nodes in one process with every listener secured: clients on SASL_SSL (SCRAM-SHA-512), brokers
with each other on SASL_SSL (SCRAM-SHA-512, the `--add-scram` user), controllers on SASL_SSL (PLAIN from
JAAS: SCRAM credentials live in the metadata log the controllers replicate, so, as in Kafka, the quorum
cannot log in with them). An RF=3 topic written with acks=all through librdkafka is replicated to all
three (the followers fetch over the secured inter-broker listener) and read back; a node stopped and
restarted under that load logs in again and catches up.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from odradek.broker.server import Broker
from odradek.storage.names import TopicPartition
from tests.harness.inprocess import active, secured_configs, until
from tests.pki import make_pki

pytestmark = pytest.mark.timeout(150)


def client_conf(bootstrap: str, pki) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "admin", "sasl.password": "admin-secret", "ssl.ca.location": str(pki.ca)}


async def all_replicas_hold(nodes, end_offset: int, timeout_s: float = 30.0) -> None:
    for p in range(3):
        tp = TopicPartition("secured", p)
        await until(lambda tp=tp: all(b.data.get_partition(tp) is not None
                                      and b.data.get_partition(tp).log.log_end_offset == end_offset for b in nodes),
                    timeout_s=timeout_s, what=f"partition {p} up to offset {end_offset} on all three replicas")


async def test_three_nodes_with_every_listener_secured(tmp_path):
    pki = make_pki(tmp_path / "pki")
    nodes = [Broker(c) for c in secured_configs(tmp_path, pki)]
    try:
        await asyncio.gather(*(b.start() for b in nodes))
        await until(lambda: len(active(nodes)) == 1, what="an active controller")
        await until(lambda: all(b.services.live_brokers() == [1, 2, 3] for b in nodes), timeout_s=60,
                    what="three unfenced brokers (registered over the SASL_SSL controller listener)")
        await until(lambda: all(("admin", 2) in b.metadata.image.scram_credentials for b in nodes),
                    what="the formatted SCRAM user on every node")
        bootstrap = ",".join(f"127.0.0.1:{port}" for b in nodes for name, _, port in b.bound if name == "CLIENT")

        def produce_and_consume(first: int) -> tuple[list[str], list[bytes]]:
            from confluent_kafka.admin import AdminClient, NewTopic

            if first == 0:
                admin = AdminClient(client_conf(bootstrap, pki))
                admin.create_topics([NewTopic("secured", 3, 3)])["secured"].result(30)
            errors: list[str] = []
            producer = Producer({**client_conf(bootstrap, pki), "acks": "all", "enable.idempotence": True})
            for i in range(first, first + 30):
                producer.produce("secured", f"v{i}".encode(), partition=i % 3,
                                 on_delivery=lambda err, _m: err is not None and errors.append(str(err)))
            if producer.flush(60):
                errors.append("not all delivered")
            consumer = Consumer({**client_conf(bootstrap, pki), "group.id": "secured-readers"})
            consumer.assign([KafkaTopicPartition("secured", p, 0) for p in range(3)])
            values: list[bytes] = []
            deadline = time.monotonic() + 45
            while len(values) < first + 30 and time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is not None and not m.error():
                    values.append(m.value())
            consumer.close()
            return errors, values

        errors, values = await asyncio.get_running_loop().run_in_executor(None, produce_and_consume, 0)
        assert errors == []
        assert sorted(values) == sorted(f"v{i}".encode() for i in range(30))
        # Every replica has every record: the followers fetched over the SASL_SSL inter-broker listener.
        await all_replicas_hold(nodes, 10)

        # A node that is not the active controller stops (controlled shutdown over the secured controller
        # listener), writes go on to the other two (min.insync.replicas=2), and when it comes back it logs in
        # again and catches up over the inter-broker listener.
        leaving = next(i for i, b in enumerate(nodes) if not b.controller.is_active)
        config = nodes[leaving].config
        await nodes[leaving].stop()
        errors, _ = await asyncio.get_running_loop().run_in_executor(None, produce_and_consume, 30)
        assert errors == []
        nodes[leaving] = Broker(config)
        await nodes[leaving].start()
        await all_replicas_hold(nodes, 20, timeout_s=60)
    finally:
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)
