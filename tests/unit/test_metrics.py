"""Broker metrics: private registries, callback-fed gauges, and the /metrics endpoint."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import socket
import urllib.error
import urllib.request

import pytest
import structlog

from odradek.broker.metrics import Metrics


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def sample(metrics: Metrics, name: str, labels: dict[str, str] | None = None) -> float | None:
    return metrics.registry.get_sample_value(name, labels or {})


def test_request_metrics():
    metrics = Metrics(node_id=7, process_metrics=False)
    metrics.observe_request("Produce", 9, 0.003)
    metrics.observe_request("Produce", 9, 0.004, error="NONE")
    metrics.observe_request("Fetch", 13, 0.2, error="NOT_LEADER_OR_FOLLOWER")
    metrics.record_error("Metadata", "UNKNOWN_TOPIC_OR_PARTITION")
    assert sample(metrics, "odradek_requests_total", {"api": "Produce", "version": "9"}) == 2
    assert sample(metrics, "odradek_requests_total", {"api": "Fetch", "version": "13"}) == 1
    assert (
        sample(metrics, "odradek_request_errors_total", {"api": "Fetch", "error": "NOT_LEADER_OR_FOLLOWER"})
        == 1
    )
    assert sample(metrics, "odradek_request_errors_total", {"api": "Produce", "error": "NONE"}) is None
    assert (
        sample(
            metrics,
            "odradek_request_errors_total",
            {"api": "Metadata", "error": "UNKNOWN_TOPIC_OR_PARTITION"},
        )
        == 1
    )
    assert sample(metrics, "odradek_request_latency_seconds_count", {"api": "Produce"}) == 2
    assert sample(metrics, "odradek_request_latency_seconds_bucket", {"api": "Fetch", "le": "0.25"}) == 1
    assert sample(metrics, "odradek_request_latency_seconds_bucket", {"api": "Fetch", "le": "0.1"}) == 0
    assert sample(metrics, "odradek_build_info", {"version": "0.1.0", "node_id": "7"}) == 1


def test_request_metrics_from_the_dispatcher():
    # The dispatcher passes the API key, the frame size, and an error flag or code.
    metrics = Metrics(process_metrics=False)
    metrics.observe_request(0, 9, 0.001, 512, False)
    metrics.observe_request(0, 9, 0.001, 256, True)
    metrics.observe_request(3, 12, 0.001, 100, 3)
    metrics.observe_request(1, 13, 0.001, 100, 0)
    metrics.protocol_error()
    assert sample(metrics, "odradek_requests_total", {"api": "Produce", "version": "9"}) == 2
    assert sample(metrics, "odradek_request_bytes_total", {"api": "Produce"}) == 768
    # A handler that raised closes the connection: no code is answered, it is counted apart.
    assert sample(metrics, "odradek_request_errors_total", {"api": "Produce", "error": "UNKNOWN_SERVER_ERROR"}) is None
    assert sample(metrics, "odradek_request_exceptions_total", {"api": "Produce"}) == 1
    assert (
        sample(
            metrics,
            "odradek_request_errors_total",
            {"api": "Metadata", "error": "UNKNOWN_TOPIC_OR_PARTITION"},
        )
        == 1
    )
    assert sample(metrics, "odradek_request_errors_total", {"api": "Fetch", "error": "NONE"}) is None
    assert sample(metrics, "odradek_protocol_errors_total") == 1


def test_bytes_and_connections():
    metrics = Metrics(process_metrics=False)
    metrics.add_bytes_in(100)
    metrics.add_bytes_out(250)
    metrics.connection_opened()
    metrics.connection_opened()
    metrics.connection_closed()
    assert sample(metrics, "odradek_bytes_in_total") == 100
    assert sample(metrics, "odradek_bytes_out_total") == 250
    assert sample(metrics, "odradek_connections_active") == 1
    assert sample(metrics, "odradek_connections_accepted_total") == 2


def test_state_callbacks():
    metrics = Metrics(process_metrics=False)
    text = metrics.render().decode()
    assert "odradek_partitions" in text and "odradek_log_size_bytes" in text  # declared even when empty
    metrics.set_log_size_source(lambda: [("orders", 0, 1234), ("orders", 1, 0)])
    metrics.set_purgatory_source(lambda: {"produce": 2})
    metrics.track_purgatory("fetch", lambda: 5)
    assert sample(metrics, "odradek_log_size_bytes", {"topic": "orders", "partition": "0"}) == 1234
    assert sample(metrics, "odradek_partitions") == 2  # derived from the log sizes when no count source
    assert sample(metrics, "odradek_purgatory_size", {"purgatory": "produce"}) == 2
    assert sample(metrics, "odradek_purgatory_size", {"purgatory": "fetch"}) == 5
    metrics.set_partition_count_source(lambda: 10)
    assert sample(metrics, "odradek_partitions") == 10


def test_registries_do_not_collide():
    a, b = Metrics(), Metrics()
    a.add_bytes_in(1)
    assert sample(a, "odradek_bytes_in_total") == 1
    assert sample(b, "odradek_bytes_in_total") == 0
    assert "process_" in a.render().decode() or "python_gc_" in a.render().decode()


def test_port_zero_is_disabled():
    assert Metrics(process_metrics=False).start_http_server(0, "127.0.0.1") is None


def fetch(port: int) -> tuple[str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.headers.get("Content-Type", ""), response.read().decode()


def test_http_server_serves_and_stops():
    metrics = Metrics(process_metrics=False)
    metrics.observe_request("ApiVersions", 3, 0.0001)
    metrics.set_log_size_source(lambda: [("t", 0, 42)])
    port = free_port()
    server = metrics.start_http_server(port, "127.0.0.1")
    assert server is not None
    try:
        assert server.port == port
        content_type, body = fetch(port)
        assert content_type.startswith("text/plain")
        assert 'odradek_requests_total{api="ApiVersions",version="3"} 1.0' in body
        assert 'odradek_log_size_bytes{partition="0",topic="t"} 42.0' in body
        assert "odradek_request_latency_seconds_bucket" in body
    finally:
        server.stop()
    server.stop()  # idempotent
    with pytest.raises(OSError):
        fetch(port)


async def test_callbacks_run_on_the_event_loop():
    loop = asyncio.get_running_loop()
    seen: list[bool] = []

    def sizes():
        seen.append(asyncio.get_running_loop() is loop)
        return [("t", 0, 1)]

    metrics = Metrics(process_metrics=False)
    metrics.set_log_size_source(sizes)
    server = metrics.start_http_server(free_port(), "127.0.0.1")  # binds the running loop
    assert server is not None
    try:
        _, body = await asyncio.to_thread(fetch, server.port)
        assert 'odradek_log_size_bytes{partition="0",topic="t"} 1.0' in body
        metrics.render()  # from the loop's own thread: called directly, no deadlock
    finally:
        server.stop()
    assert seen == [True, True]


def test_logging_json_lines():
    # broker/logging.py has no test file of its own; a smoke test here keeps it honest.
    from odradek.broker.logging import configure_logging, get_logger

    buf = io.StringIO()
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        configure_logging("json", "info", stream=buf)
        get_logger("odradek.test").info("partition_loaded", topic="t", partition=0)
        get_logger("odradek.test").debug("hidden")
        logging.getLogger("some.library").warning("plain %s", "stdlib")
        lines = [json.loads(line) for line in buf.getvalue().splitlines()]
        assert [line["event"] for line in lines] == ["partition_loaded", "plain stdlib"]
        assert lines[0]["topic"] == "t" and lines[0]["level"] == "info" and "timestamp" in lines[0]
        assert lines[1]["logger"] == "some.library" and lines[1]["level"] == "warning"

        console = io.StringIO()
        configure_logging("console", "WARN", stream=console)
        get_logger("odradek.test").info("quiet")
        get_logger("odradek.test").warning("loud", n=1)
        assert "loud" in console.getvalue() and "quiet" not in console.getvalue()
        assert "partition_loaded" not in console.getvalue()
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
        logging.captureWarnings(False)
        structlog.reset_defaults()


def test_error_codes_of_a_response_counted_per_occurrence():
    # Every non-zero code of a response, at any depth, once per occurrence (Kafka's errorCounts()).
    from odradek.protocol.error_codes import error_codes
    from odradek.protocol.messages import CreateTopicsResponse, ProduceResponse

    topics = CreateTopicsResponse(topics=[
        CreateTopicsResponse.CreatableTopicResult(name="a", error_code=36),
        CreateTopicsResponse.CreatableTopicResult(name="b", error_code=0),
    ])
    assert error_codes(topics) == [36]
    Topic = ProduceResponse.TopicProduceResponse
    Part = Topic.PartitionProduceResponse
    produce = ProduceResponse(responses=[
        Topic(name="t", partition_responses=[Part(index=0, error_code=6), Part(index=1, error_code=0),
                                             Part(index=2, error_code=6)]),
        Topic(name="u", partition_responses=[Part(index=0, error_code=3)]),
    ])
    assert sorted(error_codes(produce)) == [3, 6, 6]
    assert error_codes(ProduceResponse()) == []

    metrics = Metrics(process_metrics=False)
    metrics.count_errors(0, error_codes(produce))
    metrics.count_errors(19, error_codes(topics))
    assert sample(metrics, "odradek_request_errors_total", {"api": "Produce", "error": "NOT_LEADER_OR_FOLLOWER"}) == 2
    assert sample(metrics, "odradek_request_errors_total", {"api": "Produce", "error": "UNKNOWN_TOPIC_OR_PARTITION"}) == 1
    assert sample(metrics, "odradek_request_errors_total", {"api": "CreateTopics", "error": "TOPIC_ALREADY_EXISTS"}) == 1


def test_json_routes_beside_the_metrics():
    metrics = Metrics(process_metrics=False)

    def route(query):
        if "bad" in query:
            raise ValueError("bad is not a parameter")
        return {"echo": query.get("x")}

    metrics.add_json_route("/odradek/test", route)
    server = metrics.start_http_server(free_port(), "127.0.0.1")
    assert server is not None
    base = f"http://127.0.0.1:{server.port}"
    try:
        with urllib.request.urlopen(f"{base}/odradek/test?x=1", timeout=10) as response:
            assert response.headers["Content-Type"] == "application/json"
            assert json.loads(response.read()) == {"echo": "1"}
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{base}/odradek/test?bad=1", timeout=10)
        assert refused.value.code == 400 and json.loads(refused.value.read()) == {"error": "bad is not a parameter"}
        with pytest.raises(urllib.error.HTTPError) as posted:
            urllib.request.urlopen(urllib.request.Request(f"{base}/odradek/test", data=b"x"), timeout=10)
        assert posted.value.code == 405
        content_type, body = fetch(server.port)  # /metrics as before
        assert content_type.startswith("text/plain") and "odradek_bytes_in_total" in body
    finally:
        server.stop()
