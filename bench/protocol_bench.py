"""Protocol codec speed, next to references measured in the same run.

    python -m bench.protocol_bench [--json]

`run()` returns, for each of three typical messages,

- produce_request_v9: one topic, one partition, one 16 KiB record batch (what a producer sends);
- fetch_response_v12: one topic, 8 partitions of 16 KiB records each (what a consumer receives);
- metadata_response_v12: 3 brokers, 100 topics x 8 partitions, 3 replicas each (a cluster's metadata),

a dict of per-operation microseconds:

- encode_us: `encode(msg, v)` to bytes; decode_us: `decode(cls, data, v)` from bytes (records come
  back as memoryviews, not copies); size_us: `size(msg, v)` (the generic schema walk);
- copy_us: `bytes()` of a bytearray holding the same number of bytes: the floor any encoder pays just
  to produce its output, a ceiling for the record-heavy messages;
- kafka_python_encode_us / kafka_python_decode_us: kafka-python 3.0's JSON-driven codec on the same
  bytes, a peer implementation for comparison (absent when kafka-python is not installed);

and `bytes`, the encoded body size. Each figure is the median of a few rounds of a loop sized to take
about 20 ms, so the whole run is bounded (a few seconds). Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import uuid

from odradek.protocol.codec import decode, encode, size
from odradek.protocol.messages import FetchResponse, MetadataResponse, ProduceRequest

ROUNDS = 5
ROUND_S = 0.02
MAX_LOOPS = 20_000


def _bytes(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def produce_request() -> tuple[object, int]:
    part = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=_bytes(16 * 1024, 1))
    topic = ProduceRequest.TopicProduceData(name="bench-topic", partition_data=[part])
    return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[topic]), 9


def fetch_response() -> tuple[object, int]:
    Part = FetchResponse.FetchableTopicResponse.PartitionData
    parts = [
        Part(partition_index=i, high_watermark=1_000_000 + i, last_stable_offset=1_000_000 + i, log_start_offset=0,
             aborted_transactions=[], records=_bytes(16 * 1024, 10 + i))
        for i in range(8)
    ]
    topic = FetchResponse.FetchableTopicResponse(topic="bench-topic", partitions=parts)
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[topic]), 12


def metadata_response() -> tuple[object, int]:
    Topic = MetadataResponse.MetadataResponseTopic
    brokers = [
        MetadataResponse.MetadataResponseBroker(node_id=n, host=f"broker-{n}.example.internal", port=9092, rack=f"rack-{n}")
        for n in (1, 2, 3)
    ]
    topics = []
    for t in range(100):
        parts = [
            Topic.MetadataResponsePartition(
                partition_index=p, leader_id=1 + (t + p) % 3, leader_epoch=7, replica_nodes=[1, 2, 3],
                isr_nodes=[1, 2, 3], offline_replicas=[],
            )
            for p in range(8)
        ]
        topics.append(Topic(name=f"bench-topic-{t:03d}", topic_id=uuid.UUID(int=t + 1), partitions=parts))
    return MetadataResponse(brokers=brokers, cluster_id="bench-cluster", controller_id=1, topics=topics), 12


CASES = {
    "produce_request_v9": produce_request,
    "fetch_response_v12": fetch_response,
    "metadata_response_v12": metadata_response,
}


def per_op_us(fn) -> float:
    """Median microseconds per call of `fn` over ROUNDS rounds of a loop sized to about ROUND_S."""
    fn()  # warm up (first use compiles the codec)
    loops, elapsed = 1, 0.0
    while loops < MAX_LOOPS:
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= ROUND_S:
            break
        loops = min(MAX_LOOPS, loops * 4)
    samples = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        samples.append((time.perf_counter() - start) / loops * 1e6)
    return round(statistics.median(samples), 2)


def _kafka_python_class(msg):
    try:
        if msg.IS_REQUEST:
            from kafka.protocol.producer import ProduceRequest as cls
        elif msg.API_KEY == 1:
            from kafka.protocol.consumer import FetchResponse as cls
        else:
            from kafka.protocol.metadata import MetadataResponse as cls
    except ImportError:
        return None
    return cls


def run() -> dict:
    results = {}
    for name, make in CASES.items():
        msg, version = make()
        cls = type(msg)
        data = encode(msg, version)
        buf = bytearray(data)
        row = {
            "bytes": len(data),
            "encode_us": per_op_us(lambda: encode(msg, version)),
            "decode_us": per_op_us(lambda: decode(cls, data, version)),
            "size_us": per_op_us(lambda: size(msg, version)),
            "copy_us": per_op_us(lambda: bytes(buf)),
        }
        theirs = _kafka_python_class(msg)
        if theirs is not None:
            versioned = theirs[version]
            their_msg = versioned.decode(data)  # it encodes at the version it was decoded at
            row["kafka_python_encode_us"] = per_op_us(their_msg.encode)
            row["kafka_python_decode_us"] = per_op_us(lambda: versioned.decode(data))
        results[name] = row
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Protocol codec speed (per-operation microseconds).")
    parser.add_argument("--json", action="store_true", help="print the result dict as JSON")
    args = parser.parse_args(argv)
    results = run()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    columns = ["bytes", "encode_us", "decode_us", "size_us", "copy_us", "kafka_python_encode_us", "kafka_python_decode_us"]
    heads = ["bytes", "encode", "decode", "size", "copy", "kp enc", "kp dec"]
    print(f"{'message':<24}" + "".join(f"{h:>10}" for h in heads) + "   (microseconds per op)")
    for name, row in results.items():
        cells = "".join(f"{row[c]:>10}" if c in row else f"{'-':>10}" for c in columns)
        print(f"{name:<24}{cells}")


if __name__ == "__main__":
    main()
