"""CPU per produce request, in process: prebuilt Produce frames fed to a broker connection without sockets.

    python -m bench.produce_path [--requests 20000] [--rounds 5] [--partitions 1] [--acks 1] [--version 9]
                                 [--records-per-batch 1]

A broker starts on a temporary data directory; a `KafkaProtocol` is attached to its `NetworkServer` with a
transport that keeps what is written, and each request's frame is copied into the connection's buffer as
the socket would (`get_buffer`, `buffer_updated`). What is timed is the process CPU (`time.process_time`)
over a round of requests: the connection's pump (admission, the fast/general fork), the produce handler,
the append and the packed response, i.e. the broker's work per request without the socket and the loop
wake-ups. Each round prints its microseconds per request; the last line is the median of the rounds (and
the fastest round, the figure least moved by other work on the machine).

To compare two trees, run this file with each on the path in turn, interleaved (before, after, before,
after ...), and compare the medians: the figure moves with other work on the machine by a few percent.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import time

from odradek.broker.network import KafkaProtocol
from odradek.broker.context import SecurityProtocol
from odradek.broker.testing import running_broker
from odradek.protocol.connection import ClientConnection
from odradek.protocol.messages import CreateTopicsRequest, MetadataRequest, ProduceRequest
from odradek.protocol.records import build_batch

TOPIC = "bench-produce"


class _Transport:
    """What the connection writes is kept (and dropped between rounds); nothing is ever paused."""

    def __init__(self) -> None:
        self.out: list = []
        self.closed = False

    def write(self, data) -> None:
        self.out.append(data)

    def writelines(self, chunks) -> None:
        self.out.extend(chunks)

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 9092)}.get(name, default)

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


def _feed(proto: KafkaProtocol, data) -> None:
    view = memoryview(data)
    while view:
        buf = proto.get_buffer(len(view))
        n = min(len(buf), len(view))
        buf[:n] = view[:n]
        view = view[n:]
        proto.buffer_updated(n)


async def _call(proto, transport, client: ClientConnection, request, version: int):
    _, data = client.send_request(request, version)
    _feed(proto, data)
    for _ in range(500):
        events = client.receive_data(b"".join(bytes(c) for c in transport.out))
        if events:
            transport.out.clear()
            return events[0].response
        await asyncio.sleep(0.01)
    raise TimeoutError("no response")


async def _main(args) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        async with running_broker(tmp, **{"num.partitions": args.partitions}) as running:
            broker = running.broker
            transport = _Transport()
            proto = KafkaProtocol(broker.network, "PLAINTEXT", SecurityProtocol.PLAINTEXT)
            proto.connection_made(transport)
            client = ClientConnection(client_id="bench")
            created = await _call(proto, transport, client, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
                name=TOPIC, num_partitions=args.partitions, replication_factor=1)], timeout_ms=10_000), 5)
            assert created.topics[0].error_code == 0, created
            for _ in range(500):  # until this broker leads every partition
                meta = await _call(proto, transport, client, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]), 9)
                parts = meta.topics[0].partitions
                if len(parts) == args.partitions and all(p.leader_id == broker.node_id for p in parts) and \
                        all(broker.data.get_partition(_tp(TOPIC, p.partition_index)) is not None for p in parts):
                    break
                await asyncio.sleep(0.02)
            now_ms = int(time.time() * 1000)  # in range of message.timestamp.*.max.ms: no record is read
            batch = build_batch([(b"key", b"v" * 100, [], now_ms)] * args.records_per_batch)
            request = ProduceRequest(transactional_id=None, acks=args.acks, timeout_ms=5000, topic_data=[
                ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(index=i, records=batch)
                    for i in range(args.partitions)])])
            frames = [client.send_request(request, args.version)[1] for _ in range(args.requests * (args.rounds + 1))]
            per_request_us = []
            for round_ in range(args.rounds + 1):  # the first round warms up and is not counted
                chunk = frames[round_ * args.requests:(round_ + 1) * args.requests]
                transport.out.clear()
                gc.collect()
                started = time.process_time()
                for frame in chunk:
                    _feed(proto, frame)
                    if len(transport.out) > 256:
                        transport.out.clear()
                elapsed = time.process_time() - started
                await asyncio.sleep(0)
                assert not transport.closed, "the broker closed the connection"
                if round_:
                    per_request_us.append(elapsed / len(chunk) * 1e6)
                    print(f"round {round_}: {per_request_us[-1]:.2f} us/request", flush=True)
            return per_request_us


def _tp(topic: str, partition: int):
    from odradek.storage.names import TopicPartition

    return TopicPartition(topic, partition)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--acks", type=int, default=1, choices=(1, -1))
    parser.add_argument("--version", type=int, default=9)
    parser.add_argument("--records-per-batch", type=int, default=1,
                        help="records of 100 B in each request's batch (10000: a ~1 MiB batch)")
    args = parser.parse_args()
    results = asyncio.run(_main(args))
    print(f"median: {statistics.median(results):.2f} us/request, min {min(results):.2f} ({args.partitions} partition(s), "
          f"acks={args.acks}, v{args.version}, {args.requests} requests x {args.rounds} rounds)")


if __name__ == "__main__":
    main()
