"""Forwarding to the active controller (broker/quorum.py's ClusterControllerChannel.forward, and the
`forwarded` handlers of broker/handlers/envelope.py), against a fake loader and fake node connections.

Kafka's NodeToControllerRequestThread sends again to the new controller a request whose controller lost the
lead (disconnected, or answered NOT_CONTROLLER), and its controllers answer NOT_CONTROLLER when they are
not the active one. No request is held for the forwarding timeout where an answer is to be had.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from odradek.broker.context import ConnectionContext, RequestContext
from odradek.broker.handlers import CONTROLLER
from odradek.broker.quorum import ClusterControllerChannel
from odradek.protocol.errors import ErrorCode
from odradek.protocol.headers import RequestHeader
from odradek.protocol.messages import CreateTopicsRequest, CreateTopicsResponse

NOT_CONTROLLER = int(ErrorCode.NOT_CONTROLLER)


class FakeConnections:
    """Node id -> how it answers: a coroutine function of the message. Records every send and reset."""

    def __init__(self, answers) -> None:
        self.answers = answers
        self.sent: list[int] = []
        self.resets: list[tuple[int, str]] = []

    async def request(self, node_id, message, version, *, purpose="default", timeout_s=30.0):
        self.sent.append(node_id)
        return await self.answers[node_id](message)

    def get(self, node_id, purpose="default"):
        return SimpleNamespace(reset=lambda reason: self.resets.append((node_id, purpose)))


def _create_topics():
    return CreateTopicsRequest(timeout_ms=1000, validate_only=False, topics=[CreateTopicsRequest.CreatableTopic(
        name="t", num_partitions=1, replication_factor=1, assignments=[], configs=[])])


def _created(code: int) -> CreateTopicsResponse:
    return CreateTopicsResponse(topics=[CreateTopicsResponse.CreatableTopicResult(name="t", error_code=code)])


def _channel(loader, connections) -> ClusterControllerChannel:
    return ClusterControllerChannel(None, loader, connections, node_id=3, request_timeout_s=20.0)


async def test_a_request_held_by_a_deposed_controller_goes_to_the_new_one_and_its_connection_is_reset():
    loader = SimpleNamespace(leader_id=1)
    held = asyncio.Event()

    async def frozen(message):  # node 1 never answers (it froze, or holds it)
        held.set()
        await asyncio.Event().wait()

    async def active(message):
        return _created(0)

    connections = FakeConnections({1: frozen, 2: active})
    forwarding = asyncio.ensure_future(_channel(loader, connections).forward(_create_topics(), 7))
    await held.wait()
    loader.leader_id = 2  # the quorum moved on
    response = await asyncio.wait_for(forwarding, 10)
    assert [t.error_code for t in response.topics] == [0]
    assert connections.sent == [1, 2]
    # Later requests to node 1 must not queue behind the one it still holds (one in flight per connection).
    assert connections.resets == [(1, "forward")]


async def test_a_nodes_own_request_answered_not_controller_is_sent_again_to_the_new_controller():
    loader = SimpleNamespace(leader_id=1)

    async def deposed(message):
        loader.leader_id = 2  # it answers as the news of the new leader arrives
        return _created(NOT_CONTROLLER)

    async def active(message):
        return _created(0)

    connections = FakeConnections({1: deposed, 2: active})
    response = await asyncio.wait_for(_channel(loader, connections).forward(_create_topics(), 7), 10)
    assert [t.error_code for t in response.topics] == [0]
    assert connections.sent == [1, 2]


def test_an_inactive_controller_answers_a_nodes_request_not_controller_at_once():
    from odradek.broker.handlers.topics import handle_create_topics

    def no_forwarding(*args, **kwargs):
        raise AssertionError("an inactive controller relayed the request instead of answering it")

    services = SimpleNamespace(controller=SimpleNamespace(is_active=False, forward=no_forwarding))
    connection = ConnectionContext("c1", "127.0.0.1", "CONTROLLER", scope=CONTROLLER)
    request = _create_topics()
    ctx = RequestContext(RequestHeader(19, 7, 1, "odradek-node-forward"), request, connection, 0, 10)
    answer = handle_create_topics(services, ctx, request)
    assert [(t.name, t.error_code) for t in answer.topics] == [("t", NOT_CONTROLLER)]
