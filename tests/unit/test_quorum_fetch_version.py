"""The quorum driver sends Fetch at the version the other node accepts (ApiVersions, asked once per node).

The Raft core speaks Fetch v18 (KIP-1166's high watermark); a node of an earlier release accepts v17 at
most and closes the connection on v18. The driver caps the version by what the node advertises, as
Kafka's NetworkClient negotiates, and asks again after a request to the node fails (it may have come
back upgraded)."""

from __future__ import annotations

from odradek.broker.node_client import NodeUnavailable
from odradek.broker.quorum import QuorumDriver
from odradek.protocol.messages import ApiVersionsRequest, ApiVersionsResponse, FetchRequest, FetchResponse
from odradek.raft import API_VERSIONS, OutboundRequest, rpc


class FakeRaft:
    next_deadline_ms = 10**12
    # what the driver's quorum-leader watch reads after each call (broker/quorum.py known_leader)
    role = None
    state = None
    leader_id = -1
    epoch = 0

    def __init__(self) -> None:
        self.responses: list = []

    def handle_response(self, source, correlation_id, response, now_ms):
        self.responses.append(response)
        return []


class FakeConnections:
    """Answers ApiVersions with Fetch up to `fetch_max`, records every Fetch and the version it went at."""

    def __init__(self, fetch_max: int) -> None:
        self.fetch_max = fetch_max
        self.sent: list[tuple[str, int]] = []
        self.down = False

    async def request(self, node_id, message, version, *, purpose="default", timeout_s=30.0):
        self.sent.append((type(message).__name__, version))
        if self.down:
            raise NodeUnavailable("down")
        if isinstance(message, ApiVersionsRequest):
            Key = ApiVersionsResponse.ApiVersion
            return ApiVersionsResponse(error_code=0, api_keys=[Key(api_key=1, min_version=4, max_version=self.fetch_max),
                                                               Key(api_key=52, min_version=0, max_version=2)])
        message.encode(version)  # what goes on the wire at that version
        return FetchResponse(responses=[])


def _fetch() -> OutboundRequest:
    request = rpc.fetch_request(cluster_id="c", replica_id=2, epoch=1, fetch_offset=5, last_fetched_epoch=1,
                                log_start_offset=0, max_bytes=1 << 20, max_wait_ms=500, high_watermark=3)
    return OutboundRequest(1, 1, request, API_VERSIONS[FetchRequest.API_KEY])


async def test_fetch_goes_at_v18_to_a_node_that_accepts_it_asking_once():
    connections = FakeConnections(fetch_max=18)
    driver = QuorumDriver(FakeRaft(), connections, lambda: 0)  # type: ignore[arg-type]
    await driver._send(_fetch())
    await driver._send(_fetch())
    assert connections.sent == [("ApiVersionsRequest", 3), ("FetchRequest", 18), ("FetchRequest", 18)]


async def test_fetch_goes_at_v17_to_an_earlier_release_and_is_asked_again_after_a_failure():
    connections = FakeConnections(fetch_max=17)
    raft = FakeRaft()
    driver = QuorumDriver(raft, connections, lambda: 0)  # type: ignore[arg-type]
    await driver._send(_fetch())
    assert connections.sent == [("ApiVersionsRequest", 3), ("FetchRequest", 17)]
    connections.down = True
    await driver._send(_fetch())
    assert raft.responses[-1] is None  # the core hears of the failure
    connections.down, connections.fetch_max, connections.sent = False, 18, []
    await driver._send(_fetch())  # the node came back upgraded
    assert connections.sent == [("ApiVersionsRequest", 3), ("FetchRequest", 18)]
