"""A follower's reading side alone: CPU per MB for a NodeConnection receiving large Fetch responses.

    python -m bench.node_read [--mb-per-response 1] [--responses 400]

A server process answers every Fetch v17 with one partition holding `--mb-per-response` MiB of bytes
(nothing in it is decoded: the records field is opaque to the codec) on 127.0.0.1; this process sends
the requests one after another through `broker.node_client.NodeConnection`, as a replica fetcher does, and
reports its own CPU seconds per MB received (time.process_time), the server's cost left out. It isolates
what bench.replication_bench cannot on a loaded machine: how much of a follower's CPU is reading the
leader's answers, a figure that does not depend on batching or on the other processes.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import socket
import time
import uuid


def _serve(sock: socket.socket, payload_bytes: int) -> None:
    from odradek.protocol.connection import ServerConnection
    from odradek.protocol.messages import FetchResponse

    topic_id = uuid.UUID(int=1)
    records = bytes(payload_bytes)
    Part = FetchResponse.FetchableTopicResponse.PartitionData

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = ServerConnection()
        while data := await reader.read(1 << 16):
            for event in conn.receive_data(data):
                response = FetchResponse(responses=[FetchResponse.FetchableTopicResponse(
                    topic_id=topic_id, partitions=[Part(partition_index=0, high_watermark=1, records=records)])])
                for chunk in conn.send_response(event.header, response):
                    writer.write(chunk)

    async def main() -> None:
        server = await asyncio.start_server(handle, sock=sock)
        async with server:
            await server.serve_forever()

    import uvloop

    uvloop.run(main())


async def _client(port: int, responses: int) -> tuple[float, int]:
    from odradek.broker.node_client import NodeConnection
    from odradek.protocol.messages import FetchRequest

    request = FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=64 << 20, topics=[FetchRequest.FetchTopic(
        topic_id=uuid.UUID(int=1), partitions=[FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=0,
                                                                                      partition_max_bytes=64 << 20)])])
    conn = NodeConnection(0, "127.0.0.1", port)
    try:
        await conn.request(request, 17)  # connected, warm
        received = 0
        c0 = time.process_time()
        for _ in range(responses):
            response = await conn.request(request, 17)
            received += len(response.responses[0].partitions[0].records)
        return time.process_time() - c0, received
    finally:
        await conn.close()


def run(mb_per_response: float = 1.0, responses: int = 400) -> dict:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    server = multiprocessing.get_context("fork").Process(target=_serve, args=(sock, int(mb_per_response * (1 << 20))), daemon=True)
    server.start()
    try:
        import uvloop  # as the broker runs

        cpu_s, received = uvloop.run(_client(sock.getsockname()[1], responses))
    finally:
        server.kill()
        server.join()
    return {"responses": responses, "mb": received / 1e6, "client_cpu_ms_per_mb": cpu_s * 1e3 / (received / 1e6)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="CPU per MB of a NodeConnection reading large Fetch responses.")
    parser.add_argument("--mb-per-response", type=float, default=1.0)
    parser.add_argument("--responses", type=int, default=400)
    args = parser.parse_args(argv)
    r = run(args.mb_per_response, args.responses)
    print(f"{r['responses']} responses, {r['mb']:.0f} MB: {r['client_cpu_ms_per_mb']:.3f} ms of client CPU per MB")


if __name__ == "__main__":
    main()
