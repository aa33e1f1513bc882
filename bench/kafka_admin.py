"""Small protocol-level helpers: what a server serves (ApiVersions), and topic creation.

Topics are created with CreateTopics (through confluent-kafka's AdminClient) when the server advertises
it; otherwise by Metadata auto-creation, which makes a topic with the server's default partition count
(the harness starts Odradek with `num.partitions` set for that reason).
"""

from __future__ import annotations

import socket
import time

from odradek.protocol.connection import ClientConnection
from odradek.protocol.messages import ApiVersionsRequest, MetadataRequest

CREATE_TOPICS = 19


def _roundtrip(host: str, port: int, request, version: int, timeout_s: float = 30.0):
    conn = ClientConnection(client_id="odradek-bench")
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        _, data = conn.send_request(request, version)
        sock.sendall(data)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("server closed the connection")
            events = conn.receive_data(chunk)
            if events:
                return events[0].response
    raise TimeoutError("no response")


def api_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    host, port = bootstrap.rsplit(":", 1)
    resp = _roundtrip(host, int(port), ApiVersionsRequest(client_software_name="odradek-bench", client_software_version="0"), 3)
    return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}


# librdkafka turns features on from the ApiVersions table alone (rdkafka_feature.c): each needs every
# listed (api key, version) to fall inside the server's advertised range.
LIBRDKAFKA_FEATURES = {
    "MsgVer2 (record batches)": ((0, 3), (1, 4)),
    "LZ4": ((10, 0),),
    "ZSTD": ((0, 7), (1, 10)),
    "idempotent producer": ((22, 0),),
}


def client_features(bootstrap: str) -> dict[str, bool]:
    table = api_versions(bootstrap)
    return {name: all(k in table and table[k][0] <= v <= table[k][1] for k, v in deps) for name, deps in LIBRDKAFKA_FEATURES.items()}


def serves_create_topics(bootstrap: str) -> bool:
    try:
        return CREATE_TOPICS in api_versions(bootstrap)
    except (OSError, ConnectionError, TimeoutError):
        return False


def create_topics(bootstrap: str, names: list[str], partitions: int, timeout_s: float = 60.0) -> None:
    """CreateTopics through the AdminClient; raises on any per-topic error but TOPIC_ALREADY_EXISTS."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names], operation_timeout=timeout_s, request_timeout=timeout_s)
    for name, f in futures.items():
        try:
            f.result(timeout_s)
        except Exception as e:  # KafkaException wrapping a KafkaError
            err = e.args[0] if e.args else None
            if getattr(err, "code", lambda: None)() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise RuntimeError(f"CreateTopics {name}: {e}") from e


def auto_create_topics(bootstrap: str, names: list[str], timeout_s: float = 120.0) -> int:
    """Metadata v12 with allow_auto_topic_creation; returns the partitions the response lists."""
    host, port = bootstrap.rsplit(":", 1)
    req = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names], allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    resp = _roundtrip(host, int(port), req, 12, timeout_s)
    bad = [t for t in resp.topics if t.error_code]
    if bad:
        raise RuntimeError(f"auto-creation failed for {len(bad)} topics, first {bad[0].name}: error {bad[0].error_code}")
    return sum(len(t.partitions) for t in resp.topics)


def count_partitions(bootstrap: str, timeout_s: float = 120.0) -> int:
    """Partitions in an all-topics Metadata response."""
    host, port = bootstrap.rsplit(":", 1)
    resp = _roundtrip(host, int(port), MetadataRequest(topics=None, allow_auto_topic_creation=False), 12, timeout_s)
    return sum(len(t.partitions) for t in resp.topics)
