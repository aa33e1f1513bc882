"""A broker connection driven without a socket: a fake transport that keeps what the broker writes, `feed`
to hand bytes to the broker's protocol object, and a client that frames requests and decodes the answers
through the protocol layer's ClientConnection."""

from __future__ import annotations

from odradek.protocol.connection import ClientConnection
from odradek.protocol.messages import ProduceRequest
from odradek.protocol.records import build_batch


class FakeTransport:
    def __init__(self):
        self.out = bytearray()
        self.closed = False
        self.reading = True

    def write(self, data):
        self.out += bytes(data)

    def writelines(self, chunks):
        for c in chunks:
            self.write(c)

    def close(self):
        self.closed = True

    abort = close

    def pause_reading(self):
        self.reading = False

    def resume_reading(self):
        self.reading = True

    def get_extra_info(self, name, default=None):
        return {"peername": ("10.0.0.9", 5555), "sockname": ("127.0.0.1", 9092)}.get(name, default)

    def get_write_buffer_size(self):
        return 0


def feed(proto, data: bytes) -> None:
    view = memoryview(data)
    while view and not proto.closed:
        buf = proto.get_buffer(len(view))
        n = min(len(buf), len(view))
        buf[:n] = view[:n]
        view = view[n:]
        proto.buffer_updated(n)


class Client:
    """Frames requests and decodes responses through the protocol layer's client side."""

    def __init__(self, proto, transport):
        self.proto, self.transport, self.conn = proto, transport, ClientConnection(client_id="t")

    def call(self, request, version):
        _, data = self.conn.send_request(request, version)
        feed(self.proto, data)
        events = self.conn.receive_data(bytes(self.transport.out))
        self.transport.out.clear()
        return events[0].response if events else None


def produce(client: Client):
    batch = build_batch([(None, b"v", [], 1000)])
    request = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])])
    _, data = client.conn.send_request(request, 9)
    feed(client.proto, data)
