"""KIP-966, eligible leader replicas, on the manual clock: the partition-change rules
(metadata/partition_change.py), the controller's use of them (a broker fenced, shut down, registering after
an unclean shutdown, all replicas down together, elections), the clean-shutdown marker the broker proves
its shutdown with (storage/log_manager.py), strict min ISR on the leader (replication/partition.py), and the
cluster-wide min.insync.replicas a new cluster writes (described as DYNAMIC_DEFAULT_BROKER_CONFIG)."""

from __future__ import annotations

import json
import os
import uuid

from odradek.protocol.errors import ErrorCode
from odradek.metadata.controller import Controller, ElectionType
from odradek.metadata.image import NO_LEADER, NO_LEADER_CHANGE, PartitionImage, replay_all
from odradek.metadata.partition_change import Election, Elr, LeaderRecoveryState, build_partition_change
from odradek.metadata.records import (
    ConfigResourceType,
    PartitionChangeRecord,
    decode_metadata_record,
    encode_metadata_record,
    record_version,
)
from odradek.metadata.snapshot import image_records

from .cluster_harness import Cluster

TOPIC_ID = uuid.UUID(int=7)


def change(partition: PartitionImage, *, active=(1, 2, 3), **targets):
    return build_partition_change(partition, TOPIC_ID, 0, lambda b: b in active, **targets)


def part(isr, *, leader=None, replicas=(1, 2, 3), elr=(), last_known_elr=()) -> PartitionImage:
    leader = (isr[0] if isr else NO_LEADER) if leader is None else leader
    return PartitionImage(replicas=tuple(replicas), isr=tuple(isr), leader=leader, leader_epoch=5, partition_epoch=9,
                          elr=tuple(elr), last_known_elr=tuple(last_known_elr))


# -- the builder's rules


def test_a_shrink_below_min_isr_keeps_the_members_that_left_as_eligible():
    record = change(part([1, 2, 3]), target_isr=[1], elr=Elr(min_isr=2))
    assert record.isr == [1] and record.eligible_leader_replicas == [2, 3] and record.leader == -2


def test_a_shrink_that_stays_at_min_isr_keeps_no_elr_and_a_full_isr_clears_it():
    assert change(part([1, 2, 3]), target_isr=[1, 2], elr=Elr(min_isr=2)).eligible_leader_replicas is None
    record = change(part([1], elr=[2, 3]), target_isr=[1, 2], elr=Elr(min_isr=2))
    assert record.isr == [1, 2] and record.eligible_leader_replicas == []


def test_the_last_member_leaving_empties_the_isr_and_waits_in_the_elr():
    record = change(part([1], elr=[2]), target_isr=[], active=(2, 3), elr=Elr(min_isr=2))
    # Broker 2 is active and eligible: it leads at once, from the ELR, and is the ISR alone.
    assert record.leader == 2 and record.isr == [2] and record.eligible_leader_replicas == [1]
    record = change(part([1], elr=[2]), target_isr=[], active=(3,), elr=Elr(min_isr=2))
    assert record.leader == NO_LEADER and record.isr == [] and record.eligible_leader_replicas == [2, 1]
    assert record.last_known_elr == [1]  # the leader it had, the first time it has none


def test_without_elr_the_last_member_stays_in_the_isr():
    record = change(part([1]), target_isr=[], active=(3,))
    assert record.leader == NO_LEADER and record.isr is None and record.eligible_leader_replicas is None


def test_an_unclean_shutdown_leaves_isr_and_elr():
    record = change(part([], elr=[2, 1], last_known_elr=[1]), target_isr=[], active=(2, 3),
                    elr=Elr(min_isr=2, unclean_shutdown=(2,)))
    # Broker 2 is back and active, but no longer eligible: still no leader (unchanged), 1 still eligible.
    assert record.leader == NO_LEADER_CHANGE and record.eligible_leader_replicas == [1]


def test_with_isr_and_elr_empty_only_an_unclean_election_takes_the_last_known_leader():
    p = part([], last_known_elr=[1])
    assert change(p, elr=Elr(min_isr=2)) is None  # ONLINE: the partition waits
    record = change(p, election=Election.UNCLEAN, elr=Elr(min_isr=2))
    assert record.leader == 1 and record.isr == [1] and record.leader_recovery_state == LeaderRecoveryState.RECOVERING
    assert record.last_known_elr == []
    # Unclean, with the last leader away: any acceptable replica.
    record = change(p, election=Election.UNCLEAN, active=(3,), elr=Elr(min_isr=2))
    assert record.leader == 3 and record.isr == [3]


def test_a_single_replica_partition_takes_its_last_leader_back_at_once():
    p = part([], replicas=(1,), last_known_elr=[1])
    record = change(p, elr=Elr(min_isr=1))
    assert record.leader == 1 and record.isr == [1] and record.leader_recovery_state == LeaderRecoveryState.RECOVERING


def test_elr_records_are_written_at_version_2_and_read_back():
    record = change(part([1, 2, 3]), target_isr=[1], elr=Elr(min_isr=2))
    assert record_version(record) == 2
    assert decode_metadata_record(encode_metadata_record(record)) == record
    plain = PartitionChangeRecord(topic_id=TOPIC_ID, partition_id=0, isr=[1, 2])
    assert record_version(plain) == 0


# -- the controller: brokers leaving and coming back


def three_brokers(min_isr: int = 2) -> Cluster:
    c = Cluster(elr=True, min_isr=min_isr)
    for b in (1, 2, 3):
        c.start(b)
    c.create_topic("t", -1, -1, assignments={0: [1, 2, 3]})
    return c


def fence(c: Cluster, broker_id: int) -> None:
    c.commit(c.controller.fence_broker(broker_id))


def restart(c: Cluster, broker_id: int, *, clean: bool, now_ms: int = 100_000) -> None:
    """A new incarnation registers; a clean one names the epoch it shut down with. Then it heartbeats."""
    previous = c.epochs[broker_id] if clean else -1
    c.register(broker_id, now_ms, incarnation=uuid.uuid4(), previous_broker_epoch=previous)
    c.heartbeat(broker_id, now_ms)


def test_fencing_replicas_one_by_one_fills_the_elr():
    c = three_brokers()
    fence(c, 3)
    p = c.partition("t")
    assert p.isr == (1, 2) and p.elr == ()
    fence(c, 2)
    p = c.partition("t")
    assert p.isr == (1,) and p.elr == (2,) and p.leader == 1
    fence(c, 1)
    p = c.partition("t")
    assert p.isr == () and set(p.elr) == {1, 2} and p.leader == NO_LEADER and p.last_known_elr == (1,)


def test_a_clean_restart_of_an_eligible_replica_leads_again():
    c = three_brokers()
    for b in (3, 2, 1):
        fence(c, b)
    restart(c, 2, clean=True)
    p = c.partition("t")
    assert p.leader == 2 and p.isr == (2,) and p.elr == (1,) and p.last_known_elr == ()
    assert p.leader_recovery_state == LeaderRecoveryState.RECOVERED


def test_an_unclean_restart_leaves_isr_and_elr_and_another_eligible_replica_leads():
    c = three_brokers()
    for b in (3, 2, 1):
        fence(c, b)
    restart(c, 2, clean=False)
    p = c.partition("t")
    assert p.leader == NO_LEADER and p.elr == (1,)  # 2 is back and unfenced, but no longer eligible
    assert not c.image.brokers[2].fenced
    restart(c, 1, clean=True)
    p = c.partition("t")
    assert p.leader == 1 and p.isr == (1,) and p.elr == ()


def test_an_unclean_restart_of_a_live_leader_moves_leadership_at_once():
    # A whole-machine crash and reboot within the session: the controller learns it at registration.
    c = three_brokers()
    restart(c, 1, clean=False)
    p = c.partition("t")
    assert p.leader == 2 and p.isr == (2, 3) and p.elr == ()


def test_all_replicas_losing_power_together_leave_the_partition_waiting():
    c = three_brokers()
    for b in (3, 2, 1):
        fence(c, b)
    for b in (1, 2, 3):
        restart(c, b, clean=False)
    p = c.partition("t")
    assert p.leader == NO_LEADER and p.isr == () and p.elr == () and p.last_known_elr == (1,)
    assert c.controller.tick(101_000) == []  # nothing elects it by itself
    # An operator's unclean election takes the last known leader (it had the most), RECOVERING.
    results = c.elect(ElectionType.UNCLEAN, {"t": [0]})
    assert results == {("t", 0): ErrorCode.NONE}
    p = c.partition("t")
    assert p.leader == 1 and p.isr == (1,) and p.leader_recovery_state == LeaderRecoveryState.RECOVERING


def test_all_replicas_losing_power_with_unclean_election_enabled_elects_the_last_leader():
    c = three_brokers()
    c.commit(c.controller.alter_configs(ConfigResourceType.TOPIC, "t", {"unclean.leader.election.enable": "true"}))
    for b in (3, 2, 1):
        fence(c, b)
    restart(c, 1, clean=False)
    p = c.partition("t")
    assert p.leader == 1 and p.isr == (1,) and p.leader_recovery_state == LeaderRecoveryState.RECOVERING


def test_all_replicas_losing_power_with_unclean_election_enabled_elects_the_first_back():
    # Kafka's unclean election: the first acceptable replica, when the last leader is not back.
    c = three_brokers()
    c.commit(c.controller.alter_configs(ConfigResourceType.TOPIC, "t", {"unclean.leader.election.enable": "true"}))
    for b in (3, 2, 1):
        fence(c, b)
    restart(c, 2, clean=False)
    p = c.partition("t")
    assert p.leader == 2 and p.isr == (2,) and p.leader_recovery_state == LeaderRecoveryState.RECOVERING


def test_controlled_shutdown_of_every_replica_then_clean_restarts_come_back():
    c = three_brokers()
    now = 1000
    for b in (3, 2, 1):
        response = c.heartbeat(b, now, want_shut_down=True)
        while not response.should_shut_down:
            for other in (1, 2, 3):
                if other != b and not c.image.brokers[other].fenced:
                    c.heartbeat(other, now)
            response = c.heartbeat(b, now, want_shut_down=True)
    p = c.partition("t")
    assert p.leader == NO_LEADER and p.isr == ()
    for b in (3, 2, 1):
        restart(c, b, clean=True, now_ms=now + 50_000)
    p = c.partition("t")
    assert p.leader != NO_LEADER and p.leader_recovery_state == LeaderRecoveryState.RECOVERED


def test_a_single_replica_topic_comes_back_after_its_broker_crashed():
    c = Cluster(elr=True, min_isr=1)
    c.start(1)
    c.create_topic("solo", 1, 1)
    restart(c, 1, clean=False)
    p = c.partition("solo")
    assert p.leader == 1 and p.leader_recovery_state == LeaderRecoveryState.RECOVERING


def test_an_unregistered_broker_leaves_the_elr():
    c = three_brokers()
    for b in (3, 2, 1):
        fence(c, b)
    c.unregister(2)
    assert c.partition("t").elr == (1,)


def test_topic_min_isr_overrides_the_cluster_value_and_is_bounded_by_the_replicas():
    c = three_brokers(min_isr=1)
    c.commit(c.controller.alter_configs(ConfigResourceType.TOPIC, "t", {"min.insync.replicas": "5"}))
    fence(c, 3)
    # min ISR 5 bounded by 3 replicas: an ISR of 2 is below it.
    assert c.partition("t").elr == (3,)


def test_snapshots_keep_the_elr():
    c = three_brokers()
    for b in (3, 2, 1):
        fence(c, b)
    image = c.image
    records = [decode_metadata_record(encode_metadata_record(r)) for r in image_records(image)]
    assert replay_all(records).topics_by_name["t"].partitions[0] == image.topics_by_name["t"].partitions[0]


def test_a_clean_restart_without_elr_is_as_before():
    c = Cluster()
    for b in (1, 2, 3):
        c.start(b)
    c.create_topic("t", -1, -1, assignments={0: [1, 2, 3]})
    for b in (3, 2, 1):
        fence(c, b)
    p = c.partition("t")
    assert p.isr == (1,) and p.elr == () and p.leader == NO_LEADER
    restart(c, 1, clean=False)
    assert c.partition("t").leader == 1


# -- the cluster-wide min.insync.replicas


def test_a_new_cluster_writes_the_cluster_wide_min_isr_and_activation_writes_it_once():
    controller = Controller(min_insync_replicas=2)
    image = replay_all(controller.bootstrap_records("MkU3OEVBNTcwNTJENDM2Qk"))
    assert image.broker_configs() == {"min.insync.replicas": "2"}
    assert image.features["eligible.leader.replicas.version"] == 1
    controller.advance(image, 3)
    assert controller.activation_records() == []
    # A log whose cluster-wide value went missing gets it back from the active controller.
    controller.advance(replay_all(controller.activation_records(), image.__class__(features=image.features)), 1)
    (record,) = controller.activation_records()
    assert (record.resource_type, record.resource_name, record.name, record.value) == (
        ConfigResourceType.BROKER, "", "min.insync.replicas", "2")


def test_topics_describe_the_cluster_wide_min_isr_as_a_dynamic_default():
    from odradek.broker.config import BrokerConfig
    from odradek.broker.topic_config import BrokerLayers, ConfigSource, describe_topic

    static = BrokerConfig.from_properties({"min.insync.replicas": "2"})
    broker = BrokerLayers(static, static, cluster_default={"min.insync.replicas": "2"})
    (entry,) = describe_topic({}, broker, ["min.insync.replicas"])
    assert entry.value == "2" and entry.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert [s.source for s in entry.synonyms] == [
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG]
    (entry,) = describe_topic({"min.insync.replicas": "3"}, broker, ["min.insync.replicas"])
    assert entry.value == "3" and entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert [s.source for s in entry.synonyms][:2] == [
        ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]


# -- the broker's side: the clean-shutdown marker, strict min ISR


def test_the_clean_shutdown_marker_names_the_broker_epoch(tmp_path):
    from odradek.storage.log_manager import LogManager

    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    manager = LogManager(dirs, now_ms=0, node_id=1, cluster_id="c")
    assert manager.previous_broker_epoch() == -1  # new directories: nothing proven
    manager.close(broker_epoch=42)
    with open(os.path.join(dirs[0], ".kafka_cleanshutdown")) as f:
        assert json.load(f) == {"version": 0, "brokerEpoch": 42}
    manager = LogManager(dirs, now_ms=0, node_id=1, cluster_id="c")
    assert manager.previous_broker_epoch() == 42
    manager.abandon()  # a crash: no marker written
    manager = LogManager(dirs, now_ms=0, node_id=1, cluster_id="c")
    assert manager.previous_broker_epoch() == -1
    manager.close(broker_epoch=43)
    os.unlink(os.path.join(dirs[1], ".kafka_cleanshutdown"))  # one directory unproven: not clean
    manager = LogManager(dirs, now_ms=0, node_id=1, cluster_id="c")
    assert manager.previous_broker_epoch() == -1
    manager.close()


def test_the_high_watermark_does_not_advance_below_min_isr():
    from odradek.replication.partition import Partition
    from odradek.storage.names import TopicPartition

    class FakeLog:
        log_start_offset = 0
        log_end_offset = 0

    log = FakeLog()
    p = Partition(TopicPartition("t", 0), topic_id=TOPIC_ID, log=log, local_broker_id=1, min_insync_replicas=2)
    p.make_leader(leader_epoch=1, replicas=[1, 2, 3], isr=[1], now_ms=0)
    log.log_end_offset = 10
    assert not p.maybe_advance_high_watermark(0) and p.high_watermark == 0
    p.make_leader(leader_epoch=1, replicas=[1, 2, 3], isr=[1, 2], now_ms=0)
    p.update_follower_fetch_state(2, 10, 0)
    assert p.high_watermark == 10


def test_the_controller_logs_an_unclean_election_and_a_partition_left_waiting():
    from structlog.testing import capture_logs

    from odradek.broker.controller_channel import log_partition_events

    c = three_brokers()
    for b in (3, 2):
        fence(c, b)
    before = c.image
    records = c.controller.fence_broker(1)
    c.commit(records)
    with capture_logs() as logs:
        log_partition_events(records, before, c.image)
    (leaderless,) = logs
    assert leaderless["partition"] == "t-0" and leaderless["isr"] == [] and set(leaderless["elr"]) == {1, 2}
    before = c.image
    records = []
    for b in (1, 2, 3):
        previous = len(c.written)
        restart(c, b, clean=False)
        records += c.written[previous:]
    with capture_logs() as logs:
        log_partition_events(records, before, c.image)
    (waiting,) = logs
    assert "no in-sync or eligible replica" in waiting["event"] and waiting["last_known_leader"] == [1]
    before = c.image
    records, _ = c.controller.elect_leaders(
        __import__("odradek.protocol.messages", fromlist=["ElectLeadersRequest"]).ElectLeadersRequest(
            election_type=1, topic_partitions=None))
    c.commit(records)
    with capture_logs() as logs:
        log_partition_events(records, before, c.image)
    (unclean,) = logs
    assert unclean["event"].startswith("unclean leader election") and unclean["leader"] == 1
    assert unclean["log_level"] == "warning"


def test_the_replication_gauges_count_partitions_waiting_for_an_eligible_replica():
    from types import SimpleNamespace

    from odradek.broker.components import replication_counts

    c = three_brokers()
    c.create_topic("u", -1, -1, assignments={0: [1, 2, 3]})
    for b in (3, 2, 1):
        fence(c, b)
    restart(c, 3, clean=False)
    restart(c, 2, clean=False)
    restart(c, 1, clean=False)
    parts = SimpleNamespace(data=SimpleNamespace(partitions={}, follower_consumer_reads=0, preferred_replica_answers=0,
                                                follower_fetches_woken=0, pending_hosting=0),
                            metadata=SimpleNamespace(image=c.image))
    counts = replication_counts(parts)
    assert counts["offline"] == 2 and counts["no_eligible_leader"] == 2 and counts["waiting_for_eligible"] == 0
    c2 = three_brokers()
    for b in (3, 2, 1):
        fence(c2, b)
    parts.metadata.image = c2.image
    counts = replication_counts(parts)
    assert counts["offline"] == 1 and counts["waiting_for_eligible"] == 1 and counts["no_eligible_leader"] == 0


def test_changing_min_isr_clears_the_elr_it_applies_to():
    from odradek.metadata.controller.requests import ConfigChange

    c = three_brokers()
    c.create_topic("u", -1, -1, assignments={0: [1, 2, 3]})
    fence(c, 3)
    fence(c, 2)
    assert c.partition("t").elr == (2,) and c.partition("u").elr == (2,)
    records, _ = c.controller.decide_alter_config(ConfigChange(ConfigResourceType.TOPIC, "t", {"min.insync.replicas": "3"}))
    c.commit(records)
    assert c.partition("t").elr == () and c.partition("u").elr == (2,)
    records, _ = c.controller.decide_alter_config(ConfigChange(ConfigResourceType.BROKER, "", {"min.insync.replicas": "1"}))
    c.commit(records)
    assert c.partition("u").elr == () and c.image.broker_configs()["min.insync.replicas"] == "1"


def test_the_fsync_journal_drops_what_was_not_fsynced(tmp_path):
    import subprocess
    import sys

    from odradek.storage.fsync_journal import drop_unflushed

    journal, data = tmp_path / "journal", tmp_path / "data"
    (data / "t-0").mkdir(parents=True)
    segment, never, index = data / "t-0" / "0.log", data / "t-0" / "5.log", data / "t-0" / "0.index"
    # A process with the hook writes 10 bytes, fsyncs, writes 5 more (installed in a child: it patches os).
    script = (
        "import os, sys\n"
        "from odradek.storage.fsync_journal import install\n"
        "install(sys.argv[1])\n"
        "fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT)\n"
        "os.write(fd, b'0123456789'); os.fsync(fd); os.write(fd, b'abcde'); os.close(fd)\n"
        "with open(sys.argv[3], 'wb') as f: f.write(b'unsynced')\n"
    )
    subprocess.run([sys.executable, "-c", script, str(journal), str(segment), str(never)], check=True)
    index.write_bytes(b"kept")
    dropped = drop_unflushed(str(journal), str(data))
    assert dropped == {str(segment): 5, str(never): 8}
    assert segment.read_bytes() == b"0123456789" and never.read_bytes() == b"" and index.read_bytes() == b"kept"


def test_the_fsync_journal_is_refused_outside_pytest(tmp_path):
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    env["ODRADEK_TEST_FSYNC_JOURNAL"] = str(tmp_path / "journal")
    result = subprocess.run([sys.executable, "-m", "odradek", "broker", "start", "--override", f"log.dirs={tmp_path}"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2 and "honoured only under pytest" in result.stderr
