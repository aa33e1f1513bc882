"""The produce path's transaction checks on a live in-process broker, with raw requests at the wire:

- KIP-890 part 1's race: the coordinator answers "the partition is in the transaction", the transaction is
  aborted (its marker written) before the write lands, and the verified write must then be refused
  (INVALID_TXN_STATE) rather than open a transaction nobody ends. The interleaving is forced: the
  verification step is wrapped so that, after the coordinator's real answer, the test ends the
  transaction through the real coordinator and waits (bounded) for its marker before the answer is used.
- stray transactional batches: without a transactional id in the request (TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
  on the fast and the general path, also inside an open transaction), from two producers in one request
  (INVALID_PRODUCER_ID_MAPPING), from a producer id that is not the transactional id's (the coordinator's
  INVALID_PRODUCER_ID_MAPPING);
- Transactions V2 at the wire: `transaction.version` finalized at 2 and supported 0-2 (left out of
  ApiVersions v3's supported list, as Kafka does), EndTxn v5; Produce v12 adds the partition with no
  AddPartitionsToTxn, EndTxn v5 bumps the epoch (the markers fence the old one), and the next transaction
  starts at once on the new epoch, while the previous one's markers may still be in flight; `odradek cluster
  features` shows the levels.
"""

from __future__ import annotations

import time
import uuid

import pytest

from odradek.broker.handlers import produce as produce_handler
from odradek.broker.testing import BrokerThread, RawClient
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    AddPartitionsToTxnRequest,
    ApiVersionsRequest,
    EndTxnRequest,
    FetchRequest,
    ProduceRequest,
)
from odradek.protocol.records import build_batch
from odradek.storage.names import TopicPartition
from tests.harness.txn_requests import DEADLINE_S, abort_and_await_marker, create, end, init

pytestmark = pytest.mark.timeout(120)

PTopic = ProduceRequest.TopicProduceData
NOW = int(time.time() * 1000)


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def add(client: RawClient, txn_id: str, producer: tuple[int, int], topic: str, partitions: list[int]) -> None:
    r = client.request(AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=producer[0],
        v3_and_below_producer_epoch=producer[1],
        v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=partitions)]), 3)
    assert all(p.partition_error_code == 0 for t in r.results_by_topic_v3_and_below for p in t.results_by_partition), r


def batch(producer: tuple[int, int], seq: int, value: bytes = b"v", *, transactional: bool = True) -> bytes:
    return build_batch([(b"k", value, None, NOW)], producer_id=producer[0], producer_epoch=producer[1],
                       base_sequence=seq, transactional=transactional)


def produce(client: RawClient, txn_id: str | None, parts: list[tuple[str, int, bytes]], version: int = 9) -> list[int]:
    """Error codes per partition, in request order."""
    topics: dict[str, list] = {}
    for topic, index, records in parts:
        topics.setdefault(topic, []).append(PTopic.PartitionProduceData(index=index, records=records))
    r = client.request(ProduceRequest(transactional_id=txn_id, acks=-1, timeout_ms=10_000, topic_data=[
        PTopic(name=t, partition_data=p) for t, p in topics.items()]), version)
    return [p.error_code for t in r.responses for p in t.partition_responses]


def offsets(client: RawClient, topic: str, partition: int) -> tuple[int, int]:
    """(high watermark, last stable offset) as a read_committed consumer is told."""
    FTopic = FetchRequest.FetchTopic
    r = client.request(FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=1, forgotten_topics_data=[],
        topics=[FTopic(topic=topic, partitions=[FTopic.FetchPartition(partition=partition, fetch_offset=0,
                                                                      partition_max_bytes=1 << 20)])]), 11)
    part = r.responses[0].partitions[0]
    assert part.error_code == 0
    return part.high_watermark, part.last_stable_offset


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerThread(tmp_path_factory.mktemp("txn-checks")) as running:
        yield running


def test_an_abort_between_the_verification_and_the_write_leaves_no_hanging_transaction(broker, monkeypatch):
    topic, txn_id = name("race"), name("race-txn")
    tp = TopicPartition(topic, 0)
    services = broker.broker.services
    with RawClient(broker.bootstrap) as client:
        create(client, topic)
        producer = init(client, txn_id)
        add(client, txn_id, producer, topic, [0])
        real_verify = produce_handler.verify_transaction
        seen: list[dict] = []

        async def verify_then_abort(services, transactional_id, producer_, partitions, version, *guarding):
            refused = await real_verify(services, transactional_id, producer_, partitions, version, *guarding)
            seen.append(refused)
            # The coordinator said yes; now the transaction is aborted before the write lands: EndTxn through
            # the coordinator, whose marker sender writes the ABORT marker to the partition.
            await abort_and_await_marker(services, tp, transactional_id, producer_)
            return refused

        monkeypatch.setattr(produce_handler, "verify_transaction", verify_then_abort)
        assert produce(client, txn_id, [(topic, 0, batch(producer, 0, b"late"))]) == [ErrorCode.INVALID_TXN_STATE]
        monkeypatch.undo()
        assert seen == [{}]  # the coordinator did verify it: the guard is what refused the write
        # Only the marker is there, and nothing holds the last stable offset back.
        assert offsets(client, topic, 0) == (1, 1)
        assert broker.broker.data.get_partition(tp).log.producer_state.ongoing == {}

        # The normal path: the next transaction verifies, writes and commits.
        add(client, txn_id, producer, topic, [0])
        assert produce(client, txn_id, [(topic, 0, batch(producer, 0, b"next"))]) == [0]
        assert produce(client, txn_id, [(topic, 0, batch(producer, 1, b"next-1"))]) == [0]  # open: the fast path
        assert offsets(client, topic, 0) == (3, 1)
        assert end(client, txn_id, producer, commit=True) == 0
        deadline = time.monotonic() + DEADLINE_S
        while offsets(client, topic, 0) != (4, 4) and time.monotonic() < deadline:
            time.sleep(0.05)  # bounded poll: the commit marker is written asynchronously
        assert offsets(client, topic, 0) == (4, 4)
    assert services.data.get_partition(tp).log.producer_state.verification_states == {}


@pytest.mark.parametrize("version", [3, 8, 9, 11])  # the general path (v3: no fast path) and the fast one
def test_transactional_batches_without_a_transactional_id_are_refused(broker, version):
    topic, txn_id = name("stray"), name("stray-txn")
    with RawClient(broker.bootstrap) as client:
        create(client, topic)
        idempotent = init(client, None)
        refused = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert produce(client, None, [(topic, 0, batch(idempotent, 0)), (topic, 1, batch(idempotent, 0, transactional=False))],
                       version) == [refused, refused]  # the whole request, as Kafka answers it
        # Also inside a transaction open on the partition, where the fast path would otherwise serve it.
        producer = init(client, txn_id)
        add(client, txn_id, producer, topic, [0])
        assert produce(client, txn_id, [(topic, 0, batch(producer, 0))], version) == [0]
        assert produce(client, None, [(topic, 0, batch(producer, 1))], version) == [refused]
        assert produce(client, txn_id, [(topic, 0, batch(producer, 1))], version) == [0]  # nothing was appended
        assert offsets(client, topic, 0)[0] == 2 and offsets(client, topic, 1)[0] == 0
        assert end(client, txn_id, producer, commit=False) == 0
        # A transactional batch behind a plain one in a partition's records (no client sends that): the
        # request reads as not transactional, and the log refuses the batch that would open a transaction.
        other = init(client, None)
        mixed = batch(other, 0, transactional=False) + batch(other, 1)
        assert produce(client, None, [(topic, 1, mixed)], version) == [ErrorCode.INVALID_TXN_STATE]
        assert offsets(client, topic, 1)[0] == 0


def test_transactional_batches_of_two_producers_in_one_request_are_refused(broker):
    topic, txn_id = name("two"), name("two-txn")
    with RawClient(broker.bootstrap) as client:
        create(client, topic)
        producer = init(client, txn_id)
        add(client, txn_id, producer, topic, [0, 1])
        assert produce(client, txn_id, [(topic, 0, batch(producer, 0))]) == [0]
        assert produce(client, txn_id, [(topic, 1, batch(producer, 0))]) == [0]
        other = init(client, None)
        mapping = ErrorCode.INVALID_PRODUCER_ID_MAPPING
        for version in (3, 9):
            assert produce(client, txn_id, [(topic, 0, batch(producer, 1)), (topic, 1, batch(other, 0))],
                           version) == [mapping, mapping]
        # The same producer at another epoch is another producer too.
        assert produce(client, txn_id, [(topic, 0, batch(producer, 1)), (topic, 1, batch((producer[0], producer[1] + 1), 0))]
                       ) == [mapping, mapping]
        assert offsets(client, topic, 0)[0] == 1 and offsets(client, topic, 1)[0] == 1
        assert end(client, txn_id, producer, commit=False) == 0


def test_a_producer_id_that_is_not_the_transactional_ids_is_refused_by_its_coordinator(broker):
    """A transactional batch of a producer the coordinator does not know under that transactional id (an
    idempotent producer's id): the verification is keyed by producer id and fails, nothing is written."""
    topic, txn_id = name("mapping"), name("mapping-txn")
    with RawClient(broker.bootstrap) as client:
        create(client, topic)
        producer = init(client, txn_id)
        add(client, txn_id, producer, topic, [0])
        stranger = init(client, None)
        for version in (3, 9):
            assert produce(client, txn_id, [(topic, 0, batch(stranger, 0))], version) == [
                ErrorCode.INVALID_PRODUCER_ID_MAPPING]
        assert offsets(client, topic, 0) == (0, 0)
        assert end(client, txn_id, producer, commit=False) == 0


def test_txn_offset_commit_is_verified_like_a_produce(broker):
    """TxnOffsetCommit without AddOffsetsToTxn first would open a transaction on the group's __consumer_offsets
    partition that no marker closes (offsets pending for good); it is refused as Kafka's verification does,
    per version, and accepted once the partition is in the transaction; a fenced producer's is refused."""
    from odradek.protocol.messages import AddOffsetsToTxnRequest, OffsetFetchRequest, TxnOffsetCommitRequest

    topic, txn_id, group = name("offsets"), name("offsets-txn"), name("offsets-group")
    T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic

    def commit(producer: tuple[int, int], version: int, offset: int = 5) -> int:
        r = client.request(TxnOffsetCommitRequest(
            transactional_id=txn_id, group_id=group, producer_id=producer[0], producer_epoch=producer[1],
            generation_id=-1, member_id="", group_instance_id=None, topics=[T(name=topic, partitions=[
                T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                                                  committed_metadata="")])]), version)
        (code,) = {p.error_code for t in r.topics for p in t.partitions}
        return code

    def committed_offset() -> int:
        O = OffsetFetchRequest.OffsetFetchRequestTopic
        r = client.request(OffsetFetchRequest(group_id=group, topics=[O(name=topic, partition_indexes=[0])],
                                              require_stable=True), 7)
        assert r.error_code == 0
        return r.topics[0].partitions[0].committed_offset

    with RawClient(broker.bootstrap) as client:
        create(client, topic)
        producer = init(client, txn_id)
        add(client, txn_id, producer, topic, [0])  # a transaction is open, but without the group's offsets
        assert commit(producer, 0) == ErrorCode.INVALID_TXN_STATE
        assert commit(producer, 3) == ErrorCode.INVALID_TXN_STATE
        assert commit(producer, 4) == ErrorCode.TRANSACTION_ABORTABLE
        assert committed_offset() == -1  # nothing pending: require_stable is not told UNSTABLE_OFFSET_COMMIT
        added = client.request(AddOffsetsToTxnRequest(transactional_id=txn_id, producer_id=producer[0],
                                                      producer_epoch=producer[1], group_id=group), 3)
        assert added.error_code == 0
        assert commit((producer[0], producer[1] + 1), 3) == ErrorCode.INVALID_PRODUCER_EPOCH  # not its epoch
        assert commit(producer, 3) == 0
        assert commit(producer, 3, offset=7) == 0  # open on the partition now: not verified again
        assert end(client, txn_id, producer, commit=True) == 0
        deadline = time.monotonic() + DEADLINE_S
        while (offset := committed_offset()) != 7 and time.monotonic() < deadline:
            time.sleep(0.05)  # bounded poll: the commit marker reaches __consumer_offsets after EndTxn answers
        assert offset == 7


def test_transaction_version_2_is_advertised(broker):
    """KIP-890 part 2: a new cluster finalizes `transaction.version` 2 and every version is offered, as Kafka
    4.x does; the range 0-2 is listed to ApiVersions v4+ only (KAFKA-17492)."""
    with RawClient(broker.bootstrap) as client:
        for version in (3, 4):
            r = client.request(ApiVersionsRequest(client_software_name="odradek-test", client_software_version="1"),
                               version)
            assert r.error_code == 0
            keys = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
            assert keys[26] == (0, 5) and keys[0][1] >= 12 and keys[24] == (0, 5) and keys[28] == (0, 5)
            assert {f.name: f.max_version_level for f in r.finalized_features}["transaction.version"] == 2
            supported = {f.name: (f.min_version, f.max_version) for f in r.supported_features}
            assert supported.get("transaction.version") == (None if version < 4 else (0, 2))


def test_the_cli_shows_the_feature_levels(broker):
    """`odradek cluster features` (kafka-features describe): what an operator checks before pointing a Java
    client at the cluster."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "odradek", "cluster", "features", "--bootstrap-server",
                           broker.bootstrap, "--output", "json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    features = {f["feature"]: f for f in json.loads(done.stdout)["features"]}
    assert features["transaction.version"] == {"feature": "transaction.version", "supported_min": 0,
                                               "supported_max": 2, "finalized": 2}
    assert features["metadata.version"]["finalized"] >= 7


def test_tv2_produce_adds_the_partition_and_end_txn_bumps_the_epoch(broker):
    topic, txn_id = name("tv2"), name("tv2-txn")
    tp = TopicPartition(topic, 0)
    partition = broker.broker.data.get_partition
    with RawClient(broker.bootstrap) as client:
        create(client, topic, partitions=1)
        pid, epoch = init(client, txn_id)
        # No AddPartitionsToTxn: Produce v12 has the coordinator add the partition.
        assert produce(client, txn_id, [(topic, 0, batch((pid, epoch), 0, b"a"))], version=12) == [0]
        assert produce(client, txn_id, [(topic, 0, batch((pid, epoch), 1, b"b"))], version=12) == [0]
        r = client.request(EndTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
                                         committed=True), 5)
        assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, epoch + 1)
        # The next transaction starts at once, on the new epoch (the broker waits out the markers in flight).
        assert produce(client, txn_id, [(topic, 0, batch((pid, epoch + 1), 0, b"c"))], version=12) == [0]
        # A late write of the ended transaction is fenced by the marker's epoch.
        assert produce(client, txn_id, [(topic, 0, batch((pid, epoch), 2, b"late"))], version=12) == [
            ErrorCode.INVALID_PRODUCER_EPOCH]
        r = client.request(EndTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch + 1,
                                         committed=False), 5)
        assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, epoch + 2)
        deadline = time.monotonic() + DEADLINE_S
        while offsets(client, topic, 0) != (5, 5) and time.monotonic() < deadline:
            time.sleep(0.05)  # bounded poll: the abort marker is written after EndTxn answers
        # a, b, COMMIT, c, ABORT: nothing open, and the markers carry the bumped epochs.
        assert offsets(client, topic, 0) == (5, 5)
        assert partition(tp).log.producer_state.ongoing == {}
        assert partition(tp).log.producer_state.producers[pid].producer_epoch == epoch + 2


def test_tv2_adds_even_with_verification_off(tmp_path):
    """`transaction.partition.verification.enable=false` turns KIP-890 part 1's checks off, not part 2's add:
    without it a Produce v12 would open a transaction its coordinator never heard of (nothing would end it)."""
    topic, txn_id = name("tv2-off"), name("tv2-off-txn")
    with BrokerThread(tmp_path, **{"transaction.partition.verification.enable": False}) as running, \
            RawClient(running.bootstrap) as client:
        create(client, topic, partitions=1)
        pid, epoch = init(client, txn_id)
        assert produce(client, txn_id, [(topic, 0, batch((pid, epoch), 0, b"a"))], version=12) == [0]
        r = client.request(EndTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
                                         committed=True), 5)
        assert (r.error_code, r.producer_epoch) == (0, epoch + 1)
        deadline = time.monotonic() + DEADLINE_S
        while offsets(client, topic, 0) != (2, 2) and time.monotonic() < deadline:
            time.sleep(0.05)  # bounded poll: the commit marker closes the transaction the add opened
        assert offsets(client, topic, 0) == (2, 2)


def test_producer_state_expires_on_the_broker_except_an_open_transaction(tmp_path):
    """producer.id.expiration.ms reaches the partitions and the broker's periodic check: an idle idempotent
    producer is forgotten, a producer with a transaction open on the partition is not (DescribeProducers)."""
    from odradek.protocol.messages import DescribeProducersRequest

    settings = {"producer.id.expiration.ms": 1_000, "producer.id.expiration.check.interval.ms": 100}
    topic, txn_id = name("expiry"), name("expiry-txn")
    with BrokerThread(tmp_path, **settings) as running, RawClient(running.bootstrap) as client:
        create(client, topic, partitions=1)
        idle = init(client, None)
        producer = init(client, txn_id)
        add(client, txn_id, producer, topic, [0])
        now = int(time.time() * 1000)
        for who, transactional in ((idle, False), (producer, True)):
            records = build_batch([(b"k", b"v", None, now)], producer_id=who[0], producer_epoch=who[1], base_sequence=0,
                                  transactional=transactional)
            assert produce(client, txn_id if transactional else None, [(topic, 0, records)]) == [0]

        def active() -> set[int]:
            DTopic = DescribeProducersRequest.TopicRequest
            r = client.request(DescribeProducersRequest(topics=[DTopic(name=topic, partition_indexes=[0])]), 0)
            return {p.producer_id for p in r.topics[0].partitions[0].active_producers}

        assert active() == {idle[0], producer[0]}
        deadline = time.monotonic() + DEADLINE_S
        while active() != {producer[0]} and time.monotonic() < deadline:
            time.sleep(0.1)  # bounded poll: the broker's housekeeping runs every second
        assert active() == {producer[0]}  # the idle one went; the open transaction's producer stays
        assert end(client, txn_id, producer, commit=True) == 0
