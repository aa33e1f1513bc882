"""Share-group dead-letter queues (KIP-1191): the pure parts on a manual clock, and the manager's ordering
rule (a DLQ copy before the state write that archives its records) with a recording persister and a fake
inter-broker send that decodes what would be produced."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from odradek.broker.config import BrokerConfig
from odradek.broker.group_configs import GroupConfigError, describe_group, group_config_changes, share_settings_of
from odradek.broker.share.dlq import (
    DeadLetterQueue,
    dead_letter_records,
    dlq_partition,
    dlq_topic_problem,
    read_source_records,
)
from odradek.broker.share.manager import SharePartitionManager, ShareSettings
from odradek.broker.share.persister import InMemoryPersister
from odradek.metadata.group_config import validate_group_configs
from odradek.metadata.image import MetadataImage, PartitionImage, TopicImage
from odradek.metadata.records import ConfigResourceType
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch, iter_records
from odradek.purgatory.timing_wheel import Timer
from odradek.replication.replica_manager import ReplicaManager
from odradek.replication.share import DeadLetter, DeadLetterCause, RecordState, SharePartition, ShareSnapshot, StateBatch
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.names import TopicPartition

NOW = 1_000_000
TP = TopicPartition("work", 1)
TID = uuid.uuid4()
ACCEPT, RELEASE, REJECT, GAP = 1, 2, 3, 0
REJECTED, LIMIT = DeadLetterCause.REJECTED, DeadLetterCause.DELIVERY_LIMIT


def letters(sp: SharePartition) -> list[tuple[int, int, int, DeadLetterCause]]:
    return [(d.first_offset, d.last_offset, d.delivery_count, d.cause) for d in sp.take_dead_letters()]


# ---- the state machine ------------------------------------------------------------------------------------

def test_reject_and_the_delivery_limit_are_dead_letters_gaps_are_not():
    sp = SharePartition(0, delivery_count_limit=2, collect_dead_letters=True)
    sp.acquire("a", 0, 9, 10, NOW)
    sp.acknowledge("a", [(0, 1, [REJECT]), (2, 2, [GAP]), (3, 4, [RELEASE]), (5, 9, [ACCEPT])], NOW)
    assert letters(sp) == [(0, 1, 1, REJECTED)]  # the gap is archived without a letter; 3-4 are available again
    sp.acquire("b", 3, 4, 10, NOW)
    sp.acknowledge("b", [(3, 3, [RELEASE]), (4, 4, [REJECT])], NOW)  # 3 at the limit (2 deliveries)
    assert letters(sp) == [(3, 3, 2, LIMIT), (4, 4, 2, REJECTED)]
    assert letters(sp) == []  # taken once
    assert sp.start_offset == 10 and sp.archived_at_limit == 1


def test_lock_expiry_and_a_member_leaving_at_the_limit_are_dead_letters():
    sp = SharePartition(0, delivery_count_limit=2, record_lock_duration_ms=1000, collect_dead_letters=True)
    sp.acquire("a", 0, 4, 10, NOW)
    sp.expire(NOW + 1000)  # count 1: available again
    assert letters(sp) == []
    sp.acquire("a", 0, 1, 10, NOW + 1000)
    sp.acquire("b", 2, 4, 10, NOW + 1000)
    sp.expire(NOW + 2000)
    assert letters(sp) == [(0, 1, 2, LIMIT), (2, 4, 2, LIMIT)]
    sp2 = SharePartition(0, delivery_count_limit=2, collect_dead_letters=True)
    sp2.acquire("a", 0, 0, 1, NOW)
    sp2.release_member("a")
    sp2.acquire("b", 0, 0, 1, NOW)
    sp2.release_member("b")
    assert letters(sp2) == [(0, 0, 2, LIMIT)]


def test_nothing_is_noted_without_a_dlq():
    sp = SharePartition(0, delivery_count_limit=2)
    sp.acquire("a", 0, 3, 10, NOW)
    sp.acknowledge("a", [(0, 3, [REJECT])], NOW)
    assert not sp.has_dead_letters and sp.take_dead_letters() == []


def test_restore_archives_a_last_delivery_cut_short_as_a_dead_letter():
    """A record acquired for its last delivery when its leader stopped is persisted AVAILABLE at the limit:
    the new leader archives it, and that is a dead letter; an archived batch is not one again."""
    snapshot = ShareSnapshot(1, 10, (StateBatch(10, 11, RecordState.AVAILABLE, 3), StateBatch(12, 12, RecordState.ARCHIVED, 3),
                                     StateBatch(13, 14, RecordState.AVAILABLE, 1)))
    sp = SharePartition.restore(snapshot, delivery_count_limit=3, collect_dead_letters=True)
    assert letters(sp) == [(10, 11, 3, LIMIT)]
    assert sp.start_offset == 13 and sp.archived_at_limit == 2
    assert not SharePartition.restore(snapshot, delivery_count_limit=3).has_dead_letters


# ---- the DLQ topic's rules and records ---------------------------------------------------------------------

def image(*, dlq: str = "dlq.work", enabled: str | None = "true", partitions: int = 2, share_version: int = 2,
          group_configs: dict[str, str] | None = None) -> MetadataImage:
    topics = {}
    if partitions:
        parts = {i: PartitionImage(replicas=(1,), isr=(1,), leader=1, leader_epoch=0, partition_epoch=0)
                 for i in range(partitions)}
        topics[dlq] = TopicImage(dlq, uuid.uuid4(), parts)
    configs = {}
    if enabled is not None:
        configs[(ConfigResourceType.TOPIC, dlq)] = {"errors.deadletterqueue.group.enable": enabled}
    if group_configs:
        configs[(ConfigResourceType.GROUP, "g")] = group_configs
    return MetadataImage(topics_by_name=topics, topics_by_id={t.topic_id: t for t in topics.values()}, configs=configs,
                         features={"share.version": share_version})


def test_which_topic_may_be_a_dlq_as_kafka_decides():
    ok = image()
    assert dlq_topic_problem("g", "dlq.work", ok, "dlq.", False) is None
    assert "cannot start with __" in dlq_topic_problem("g", "__consumer_offsets", ok, "dlq.", False)
    assert "does not comply with the DLQ topic prefix" in dlq_topic_problem("g", "errors", image(dlq="errors"), "dlq.", False)
    assert dlq_topic_problem("g", "dlq.work", image(dlq="dlq.work"), "", False) is None  # "" lifts the prefix rule
    assert "DLQ is not enabled on configured DLQ topic" in dlq_topic_problem("g", "dlq.work", image(enabled=None), "dlq.", False)
    assert "DLQ is not enabled" in dlq_topic_problem("g", "dlq.work", image(enabled="false"), "dlq.", False)
    missing = image(partitions=0)
    assert "does not exist and auto create is disabled" in dlq_topic_problem("g", "dlq.work", missing, "dlq.", False)
    assert dlq_topic_problem("g", "dlq.work", missing, "dlq.", True) is None
    assert [dlq_partition(p, 3) for p in range(5)] == [0, 1, 2, 0, 1]


def test_each_archived_offset_is_one_record_with_kafkas_headers(tmp_path):
    log = Log.open(str(tmp_path / "work-1"), LogConfig(), now_ms=NOW)
    try:
        log.append(bytearray(build_batch([(b"k0", b"v0", [("h", b"x")], NOW), (b"k1", b"v1", None, NOW)])), now_ms=NOW, leader_epoch=0)
        log.append(bytearray(build_batch([(None, b"v2", None, NOW)])), now_ms=NOW, leader_epoch=0)
        dead = [DeadLetter(1, 2, 5, LIMIT), DeadLetter(7, 7, 1, REJECTED)]
        sources = read_source_records(log, dead, log.log_end_offset)
        assert sorted(sources) == [1, 2]  # 7 is not in the log: headers only
        out = dead_letter_records("g", TP, dead, NOW + 5, sources)
    finally:
        log.close()
    assert [(k, v) for k, v, _, _ in out] == [(b"k1", b"v1"), (None, b"v2"), (None, None)]
    assert all(ts == NOW + 5 for *_, ts in out)
    assert dict(out[0][2]) == {"__dlq.errors.topic": b"work", "__dlq.errors.partition": b"1",
                               "__dlq.errors.offset": b"1", "__dlq.errors.group": b"g",
                               "__dlq.errors.delivery.count": b"5",
                               "__dlq.errors.message": b"Offset delivery count exceeded the threshold."}
    assert dict(out[2][2])["__dlq.errors.message"] == b"Offset rejected by client."
    assert [r[:2] for r in dead_letter_records("g", TP, dead[:1], NOW)] == [(None, None), (None, None)]  # no copy


# ---- group configs ------------------------------------------------------------------------------------------

def test_dlq_group_configs_validated_and_gated_by_share_version_2():
    validate_group_configs({"errors.deadletterqueue.topic.name": "dlq.work",
                            "errors.deadletterqueue.copy.record.enable": "TRUE"})
    with pytest.raises(ValueError, match="DLQ topic name must not start with '__'"):
        validate_group_configs({"errors.deadletterqueue.topic.name": "__x"})
    with pytest.raises(ValueError, match="errors.deadletterqueue.copy.record.enable"):
        validate_group_configs({"errors.deadletterqueue.copy.record.enable": "yes"})
    cfg = BrokerConfig()
    set_topic = [("errors.deadletterqueue.topic.name", 0, "dlq.work")]
    assert group_config_changes(image(), cfg, "g", set_topic) == {"errors.deadletterqueue.topic.name": "dlq.work"}
    with pytest.raises(GroupConfigError, match="needs share.version 2") as refused:
        group_config_changes(image(share_version=1), cfg, "g", set_topic)
    assert refused.value.error_code == ErrorCode.INVALID_CONFIG
    group_config_changes(image(share_version=1), cfg, "g", [("errors.deadletterqueue.topic.name", 1, None)])  # delete ok
    names = {e.name for e in describe_group(image(), cfg, "g")}
    assert {"errors.deadletterqueue.topic.name", "errors.deadletterqueue.copy.record.enable"} <= names
    assert not {n for n in (e.name for e in describe_group(image(share_version=1), cfg, "g")) if n.startswith("errors.")}
    own = {"errors.deadletterqueue.topic.name": "dlq.work", "errors.deadletterqueue.copy.record.enable": "true"}
    base = ShareSettings()
    assert share_settings_of(image(group_configs=own), cfg, "g", base).dlq_topic == "dlq.work"
    assert share_settings_of(image(group_configs=own), cfg, "g", base).dlq_copy_record
    assert share_settings_of(image(group_configs=own, share_version=1), cfg, "g", base).dlq_topic == ""


# ---- the manager: DLQ copy before the state write ------------------------------------------------------------

class Recorder:
    """The order of events: DLQ produce requests and share-state writes."""

    def __init__(self) -> None:
        self.events: list[tuple] = []


class RecordingPersister(InMemoryPersister):
    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder
        self.fail = False  # as a crash between the DLQ write and the state write would leave it

    async def write(self, key, leader_epoch, snapshot, delivery_complete_count=-1):
        self.recorder.events.append(("state", snapshot.start_offset,
                                     tuple((b.first_offset, b.last_offset, b.delivery_state) for b in snapshot.state_batches)))
        if self.fail:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return await super().write(key, leader_epoch, snapshot, delivery_complete_count)


class Env:
    def __init__(self, tmp_path, *, answer: ErrorCode = ErrorCode.NONE, **settings) -> None:
        self.clock = lambda: NOW
        self.recorder = Recorder()
        self.data = ReplicaManager(node_id=1, timer=Timer(start_ms=NOW))
        self.log = Log.open(str(tmp_path / "work-1"), LogConfig(), now_ms=NOW)
        self.data.add_leader_partition(TP, topic_id=TID, log=self.log, leader_epoch=3, replicas=[1], isr=[1],
                                       min_insync_replicas=1, now_ms=NOW)
        self.persister = RecordingPersister(self.recorder)
        self.answer = answer
        self.image = image()
        self.dlq = DeadLetterQueue(image=lambda: self.image, send=self.send, clock=self.clock, deadline_ms=0)
        self.manager = SharePartitionManager(data=self.data, persister=self.persister, clock=self.clock,
                                             settings=ShareSettings(auto_offset_reset="earliest", **settings),
                                             dead_letters=self.dlq)

    async def send(self, node_id, request, version):
        (topic,) = request.topic_data
        (part,) = topic.partition_data
        records = list(iter_records(part.records, max_uncompressed_bytes=1 << 20))
        self.recorder.events.append(("dlq", topic.name, part.index, [(r.key, r.value, dict(r.headers)) for r in records]))
        await asyncio.sleep(0)

        class Answer:
            error_code = int(self.answer)
            error_message = None

        class Topic:
            partition_responses = [Answer()]

        class Response:
            responses = [Topic()]
        return Response()

    async def fetch(self, member):
        return (await self.manager.fetch("g", member, [(TID, TP)], max_records=100, max_bytes=1 << 20,
                                         max_wait_ms=0))[TP]

    async def ack(self, member, *batches):
        return (await self.manager.acknowledge("g", member, [(TID, TP, list(batches))]))[TP]


@pytest.fixture
def env(tmp_path):
    made = []

    def make(**kw) -> Env:
        e = Env(tmp_path / str(len(made)), **kw)
        made.append(e)
        return e
    yield make
    for e in made:
        e.log.close()


async def test_a_rejected_record_is_copied_before_the_state_that_archives_it(env):
    e = env(dlq_topic="dlq.work", dlq_copy_record=True)
    e.data.append_internal(TP, bytearray(build_batch([(b"k", b"poison", None, NOW), (b"k2", b"ok", None, NOW)])), now_ms=NOW)
    got = await e.fetch("a")
    assert [(r.first_offset, r.last_offset) for r in got.acquired] == [(0, 1)]
    e.recorder.events.clear()
    assert await e.ack("a", (0, 0, [REJECT]), (1, 1, [ACCEPT])) == (0, None)
    dlq, state = e.recorder.events
    assert dlq[:3] == ("dlq", "dlq.work", 1)  # source partition 1 of a 2-partition DLQ topic
    ((key, value, headers),) = dlq[3]
    assert (key, value) == (b"k", b"poison")
    assert headers["__dlq.errors.offset"] == b"0" and headers["__dlq.errors.message"] == b"Offset rejected by client."
    assert state[1] == 2  # the state written after the copy archives it (start past both records)
    figures = e.manager.figures()
    assert figures["dlq_records"] == 1 and figures["per_partition"][0][3]["dlq_records"] == 1


async def test_released_to_the_limit_is_copied_headers_only_by_default(env):
    e = env(dlq_topic="dlq.work", delivery_count_limit=2)
    e.data.append_internal(TP, bytearray(build_batch([(b"k", b"v", None, NOW)])), now_ms=NOW)
    await e.fetch("a")
    await e.ack("a", (0, 0, [RELEASE]))
    assert [ev[0] for ev in e.recorder.events] == ["state", "state"]  # the initial start, then available again
    await e.fetch("a")
    e.recorder.events.clear()
    await e.ack("a", (0, 0, [RELEASE]))
    (dlq, state) = e.recorder.events
    ((key, value, headers),) = dlq[3]
    assert (key, value) == (None, None)
    assert headers["__dlq.errors.delivery.count"] == b"2"
    assert headers["__dlq.errors.message"] == b"Offset delivery count exceeded the threshold."
    assert state[1] == 1


async def test_without_a_dlq_topic_records_are_only_archived(env):
    e = env()
    e.data.append_internal(TP, bytearray(build_batch([(b"k", b"v", None, NOW)])), now_ms=NOW)
    await e.fetch("a")
    e.recorder.events.clear()
    await e.ack("a", (0, 0, [REJECT]))
    assert [ev[0] for ev in e.recorder.events] == ["state"]
    assert e.manager.figures()["dlq_records"] == 0


async def test_a_failed_dlq_write_is_counted_and_the_records_archived_anyway(env):
    e = env(dlq_topic="dlq.work", answer=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    e.data.append_internal(TP, bytearray(build_batch([(b"k", b"v", None, NOW)])), now_ms=NOW)
    await e.fetch("a")
    e.recorder.events.clear()
    assert await e.ack("a", (0, 0, [REJECT])) == (0, None)
    assert [ev[0] for ev in e.recorder.events] == ["dlq", "state"]
    figures = e.manager.figures()
    assert (figures["dlq_records"], figures["dlq_failures"]) == (0, 1)
    assert e.manager.describe("g", TP).start_offset == 1
    e2 = env(dlq_topic="dlq.missing")  # a topic that does not exist: no request at all, archived, counted
    e2.data.append_internal(TP, bytearray(build_batch([(b"k", b"v", None, NOW)])), now_ms=NOW)
    await e2.fetch("a")
    e2.recorder.events.clear()
    await e2.ack("a", (0, 0, [REJECT]))
    assert [ev[0] for ev in e2.recorder.events] == ["state"] and e2.manager.figures()["dlq_failures"] == 1


async def test_a_state_write_lost_after_the_copy_means_a_second_copy_never_none(env):
    """At least once: the copy is written, the state write that archives the record fails (as a crash between
    them would leave it), so the record is delivered again; rejected again, it is copied again."""
    e = env(dlq_topic="dlq.work")
    e.data.append_internal(TP, bytearray(build_batch([(b"k", b"v", None, NOW)])), now_ms=NOW)
    await e.fetch("a")
    e.persister.fail = True
    code, _ = await e.ack("a", (0, 0, [REJECT]))
    assert code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    e.persister.fail = False
    again = await e.fetch("b")  # the state is read again: the record was never archived
    assert [(r.first_offset, r.delivery_count) for r in again.acquired] == [(0, 1)]
    await e.ack("b", (0, 0, [REJECT]))
    assert [ev[0] for ev in e.recorder.events if ev[0] == "dlq"] == ["dlq", "dlq"]
    assert e.manager.describe("g", TP).start_offset == 1
