"""Power loss on three real broker processes: a node loses what it had not fsync'd, alone and all at once.

Each node runs with the fsync journal (storage/fsync_journal.py, `ODRADEK_TEST_FSYNC_JOURNAL`): a power loss
is kill -9, then every segment file of the node cut back to its last fsync'd size, then a restart on that
data. The defaults flush nothing on a schedule, so the records the node acknowledged since are gone from it.

  * one node (the partition's leader) loses power, under idempotent acks=all with min.insync.replicas=2:
    its restart is unclean (no clean-shutdown marker, no PreviousBrokerEpoch), so the controller keeps it out
    of ISR, ELR and leadership until it has caught up; then the new leader loses power too. The checker
    finds every acknowledged record, at its offset (Kafka's promise: acks=all survives one node's loss).
  * every replica loses power at once: no replica is known to hold what was acknowledged, so the partition
    waits with no leader (KIP-966) instead of electing one that lost it, and the active controller logs it;
    an operator's unclean election (`odradek topic elect-leaders --election-type unclean`) then brings it
    back, RECOVERING, and the controller logs what was lost. The checker shows the loss is real: the
    acknowledged records were in no replica's flushed data.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from odradek.protocol.messages import MetadataRequest
from odradek.storage.fsync_journal import drop_unflushed

from tests.harness.processes import Cluster, create_with_confluent, odradek

from ..checker import Seen, Sent, check

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("power-loss")
    journal = base / "fsync-journal"
    previous = os.environ.get("ODRADEK_TEST_FSYNC_JOURNAL")
    os.environ["ODRADEK_TEST_FSYNC_JOURNAL"] = str(journal)
    c = Cluster(base / "cluster")
    c.journal = journal
    try:
        c.up()
        yield c
    finally:
        for node_id in range(1, c.nodes + 1):
            try:
                os.kill(c.pid(node_id), signal.SIGCONT)
            except (ProcessLookupError, FileNotFoundError, ValueError):
                pass
        c.down()
        if previous is None:
            os.environ.pop("ODRADEK_TEST_FSYNC_JOURNAL", None)
        else:
            os.environ["ODRADEK_TEST_FSYNC_JOURNAL"] = previous


def lose_power(cluster: Cluster, node_id: int) -> dict[str, int]:
    """kill -9 the node, then drop what it had not fsync'd: path -> bytes dropped. Returns once the process
    is gone (reaped by init: `cluster up` takes a pid that still answers signals for a running node)."""
    pid = cluster.pid(node_id)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    dropped = None
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                dead = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            dead = True
        if dead and dropped is None:  # its files are closed: the disk now holds what was fsync'd
            dropped = drop_unflushed(str(cluster.journal), str(cluster.dir / f"node-{node_id}" / "data"))
        if dead:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return dropped
        time.sleep(0.05)
    raise AssertionError(f"node {node_id} (pid {pid}) did not go away after SIGKILL")


def partition_state(cluster: Cluster, node_id: int, topic: str):
    md = cluster.metadata(node_id, [MetadataRequest.MetadataRequestTopic(name=topic)])
    return md.topics[0].partitions[0] if md.topics and md.topics[0].partitions else None


def produce(bootstrap: str, topic: str, first: int, count: int, sent: list[Sent]) -> None:
    def delivered(err, msg) -> None:
        if err is None:
            sent.append(Sent(msg.topic(), msg.partition(), msg.offset(), msg.value(), "p", int(msg.key())))

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "message.timeout.ms": 60000})
    for i in range(first, first + count):
        producer.produce(topic, key=b"%d" % i, value=b"%s-%d" % (topic.encode(), i), on_delivery=delivered)
    assert producer.flush(90) == 0


def consume_all(bootstrap: str, topic: str, expected: int) -> list[Seen]:
    """Every record of partition 0 from the start, without a group coordinator (the offsets topic may be
    the one waiting for a replica)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "power-loss-reader",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    seen: list[Seen] = []
    deadline = time.monotonic() + 30
    quiet_until = None
    while time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            seen.append(Seen(m.topic(), m.partition(), m.offset(), m.value()))
            quiet_until = None
        elif len(seen) >= expected:
            break
        elif m is None and expected == 0:
            quiet_until = quiet_until or time.monotonic() + 3
            if time.monotonic() > quiet_until:
                break
    consumer.close()
    return seen


def test_one_node_losing_power_loses_nothing_acknowledged(cluster):
    create_with_confluent(cluster.bootstrap(1), "one", 1, replication=3)
    full = cluster.wait(lambda: (lambda p: p if p is not None and p.leader_id > 0 and len(p.isr_nodes) == 3 else None)(
        partition_state(cluster, 1, "one")), "the topic, in sync")
    sent: list[Sent] = []
    produce(cluster.bootstrap(1), "one", 0, 300, sent)

    first = full.leader_id
    dropped = lose_power(cluster, first)
    assert any("one-0" in path for path in dropped), dropped  # it did lose acknowledged records
    alive = [n for n in (1, 2, 3) if n != first]
    state = cluster.wait(lambda: (lambda p: p if p is not None and p.leader_id in alive else None)(
        partition_state(cluster, alive[0], "one")), "a new leader")
    produce(cluster.bootstrap(alive[0]), "one", 300, 200, sent)

    cluster.up()  # the node comes back on what its disk kept
    log = (cluster.dir / f"node-{first}" / "node.log").read_text()
    assert "the last shutdown was not clean" in log
    cluster.wait(lambda: (lambda p: p is not None and first in p.isr_nodes)(partition_state(cluster, alive[0], "one")),
                 "the node back in the ISR, caught up")

    # The leader it handed over to loses power too: only the re-replicated copies are left to lead.
    second = partition_state(cluster, alive[0], "one").leader_id
    assert second != first or state.leader_id != first
    dropped = lose_power(cluster, second)
    others = [n for n in (1, 2, 3) if n != second]
    cluster.wait(lambda: (lambda p: p is not None and p.leader_id in others)(partition_state(cluster, others[0], "one")),
                 "a leader after the second power loss")
    cluster.up()
    cluster.wait(lambda: (lambda p: p is not None and len(p.isr_nodes) == 3)(partition_state(cluster, others[0], "one")),
                 "all three in sync again")

    seen = consume_all(cluster.bootstrap(others[0]), "one", 500)
    report = check(sent, seen)
    assert len(sent) == 500 and report.problems() == {}, report.summary()


def test_all_replicas_losing_power_wait_for_an_unclean_election(cluster):
    create_with_confluent(cluster.bootstrap(1), "all", 1, replication=3)
    cluster.wait(lambda: (lambda p: p is not None and p.leader_id > 0 and len(p.isr_nodes) == 3)(
        partition_state(cluster, 1, "all")), "the topic, in sync")
    sent: list[Sent] = []
    produce(cluster.bootstrap(1), "all", 0, 200, sent)

    dropped: dict[str, int] = {}
    for node_id in (1, 2, 3):
        dropped.update(lose_power(cluster, node_id))
    assert sum(n for path, n in dropped.items() if "all-0" in path) > 0, dropped
    cluster.up()

    # No replica is known to hold what was acknowledged: the partition waits, and the controller says so.
    cluster.wait(lambda: (lambda p: p is not None and p.leader_id == -1 and not p.isr_nodes)(
        partition_state(cluster, 1, "all")), "the partition waiting with no leader")
    said = cluster.wait(lambda: [line for n in (1, 2, 3)
                                 for line in (cluster.dir / f"node-{n}" / "node.log").read_text().splitlines()
                                 if "no in-sync or eligible replica" in line and "all-0" in line],
                        "the controller's log of the waiting partition")
    print(said[0])

    # An operator's unclean election brings it back, RECOVERING, and the controller logs it.
    result = odradek("topic", "elect-leaders", "--election-type", "unclean", "--topic", "all", "--partition", "0",
                     "--bootstrap-server", cluster.bootstrap(1))
    assert result.returncode == 0, result.stdout + result.stderr
    print(result.stdout)
    state = cluster.wait(lambda: (lambda p: p if p is not None and p.leader_id > 0 else None)(
        partition_state(cluster, 1, "all")), "a leader from the unclean election")
    said = cluster.wait(lambda: [line for n in (1, 2, 3)
                                 for line in (cluster.dir / f"node-{n}" / "node.log").read_text().splitlines()
                                 if "unclean leader election" in line and "all-0" in line],
                        "the controller's log of the unclean election")
    print(said[0])

    seen = consume_all(cluster.bootstrap(state.leader_id), "all", 0)
    report = check(sent, seen)
    # The loss is real (nothing had been flushed anywhere) and it was said out loud, not silent.
    assert report.lost and not report.offset_reused, report.summary()
    print(f"all replicas lost power: {report.summary()}")
