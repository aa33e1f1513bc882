"""The broker's network SharePersister with a fake network: routing from the image, batching per coordinator
and group, one share-partition per request, retries of retriable answers and unreachable nodes up to the
deadline, the coordinator's own answers returned at once, the in-process short-cut."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from odradek.broker.share.network_persister import NetworkPersister
from odradek.broker.share.persister import SharePartitionKey
from odradek.coordinator.runtime import InMemoryPartitionWriter
from odradek.coordinator.share.config import ShareCoordinatorConfig
from odradek.coordinator.share.coordinator import ShareCoordinator
from odradek.protocol.errors import ErrorCode
from odradek.purgatory.timing_wheel import Timer
from odradek.replication.share import RecordState, ShareSnapshot, StateBatch

TOPIC = uuid.UUID(int=42)
KEYS = [SharePartitionKey("g", TOPIC, p) for p in range(3)]


def image(leader: int):
    topic = SimpleNamespace(partitions={0: SimpleNamespace(leader=leader)})
    return SimpleNamespace(topics_by_name={"__share_group_state": topic})


class Net:
    """Answers requests from a real coordinator (as the remote broker would), after `refusals` answers of
    `refusal` per request, or raises `ConnectionError` for the first `drops` requests."""

    def __init__(self) -> None:
        self.coordinator = ShareCoordinator(InMemoryPartitionWriter(), Timer(start_ms=0),
                                            ShareCoordinatorConfig(state_topic_num_partitions=1))
        self.coordinator.startup(0)
        self.sent: list[tuple[int, int, int]] = []  # (node, api key, partitions)
        self.refusals = 0
        self.refusal = ErrorCode.NOT_COORDINATOR
        self.drops = 0

    async def send(self, node: int, request, version: int):
        self.sent.append((node, request.API_KEY, sum(len(t.partitions) for t in request.topics)))
        if self.drops:
            self.drops -= 1
            raise ConnectionError("node gone")
        if self.refusals:
            self.refusals -= 1
            answer = await self._answer(request, version)
            for r in answer.results:
                for p in r.partitions:
                    p.error_code = int(self.refusal)
            return answer
        return await self._answer(request, version)

    async def _answer(self, request, version: int):
        c = self.coordinator
        ops = {83: c.initialize_state, 84: c.read_state, 85: c.write_state, 86: c.delete_state, 87: c.read_state_summary}
        return ops[request.API_KEY](request, version, 0).result()


def persister(net: Net, leader: int = 2, local=None, deadline_ms: int = 2_000) -> NetworkPersister:
    loop = asyncio.get_running_loop()
    return NetworkPersister(node_id=1, image=lambda: image(leader), local=local or (lambda: net.coordinator),
                            ensure_topic=lambda: None, send=net.send, clock=lambda: int(loop.time() * 1000),
                            retry_backoff_ms=5, retry_backoff_max_ms=20, deadline_ms=deadline_ms)


async def test_calls_of_one_turn_go_as_one_request_and_answers_map_back():
    net = Net()
    p = persister(net)
    codes = await asyncio.gather(*(p.initialize(k, 0, 10 * k.partition) for k in KEYS))
    assert codes == [ErrorCode.NONE] * 3
    assert net.sent == [(2, 83, 3)]
    reads = await asyncio.gather(*(p.read(k, 1) for k in KEYS))
    assert [r.snapshot.start_offset for r in reads] == [0, 10, 20]
    assert net.sent[-1] == (2, 84, 3)


async def test_two_writes_of_one_share_partition_go_in_order_in_two_requests():
    net = Net()
    p = persister(net)
    first = p.write(KEYS[0], 1, ShareSnapshot(0, 0, (StateBatch(0, 9, RecordState.AVAILABLE, 1),)))
    second = p.write(KEYS[0], 1, ShareSnapshot(0, 5, (StateBatch(5, 9, RecordState.ACKNOWLEDGED, 1),)))
    other = p.write(KEYS[1], 1, ShareSnapshot(0, 0, ()))
    assert await asyncio.gather(first, second, other) == [ErrorCode.NONE] * 3
    assert net.sent == [(2, 85, 2), (2, 85, 1)]
    assert (await p.read(KEYS[0], 1)).snapshot == ShareSnapshot(0, 5, (StateBatch(5, 9, RecordState.ACKNOWLEDGED, 1),))


async def test_retriable_answers_and_unreachable_nodes_are_retried():
    net = Net()
    p = persister(net)
    net.refusals, net.drops = 2, 1
    assert await p.initialize(KEYS[0], 0, 0) is ErrorCode.NONE
    assert len(net.sent) == 4  # dropped, refused twice, answered


async def test_the_coordinators_own_answer_is_returned_at_once():
    net = Net()
    p = persister(net)
    await p.initialize(KEYS[0], 3, 0)
    sent = len(net.sent)
    assert await p.initialize(KEYS[0], 2, 0) is ErrorCode.FENCED_STATE_EPOCH
    assert len(net.sent) == sent + 1


async def test_gives_up_at_the_deadline_with_the_last_code():
    net = Net()
    p = persister(net, deadline_ms=100)
    net.refusals, net.refusal = 10_000, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    result = await p.read(KEYS[0], 0)
    assert result.error_code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and result.snapshot is None


async def test_no_leader_yet_is_coordinator_not_available_until_the_deadline():
    net = Net()
    p = persister(net, leader=-1, deadline_ms=50)
    assert await p.initialize(KEYS[0], 0, 0) is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert net.sent == []


async def test_this_brokers_own_coordinator_is_called_in_process():
    net = Net()
    p = persister(net, leader=1)
    assert await p.write(KEYS[2], 0, ShareSnapshot(0, 0, (StateBatch(0, 0, RecordState.ARCHIVED, 5),))) is ErrorCode.NONE
    summary = await p.read_summary(KEYS[2])
    assert (summary.error_code, summary.start_offset) == (ErrorCode.NONE, 0)
    assert await p.delete("g", [(TOPIC, 2)]) == {(TOPIC, 2): ErrorCode.NONE}
    assert net.sent == [] and p.local_calls == 3


async def test_close_answers_waiting_calls():
    net = Net()
    p = persister(net)
    net.drops = 10_000
    pending = asyncio.ensure_future(p.read(KEYS[0], 0))
    await asyncio.sleep(0.02)
    await p.close()
    assert (await pending).error_code is ErrorCode.COORDINATOR_NOT_AVAILABLE
