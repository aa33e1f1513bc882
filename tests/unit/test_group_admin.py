"""Admin APIs (DescribeGroups, ListGroups, DeleteGroups), FindCoordinator, partitioning and the records."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.coordinator.group import records as r
from odradek.coordinator.partitioning import java_string_hash_code, partition_for
from odradek.purgatory.deferred import Deferred, gather
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    ListGroupsRequest,
)

from tests.harness.group_coordinator import Harness, form_group

INT32_MIN = -(1 << 31)


# ---------------------------------------------------------------------------------------------------
# Partitioning: Java's String.hashCode, exactly


@pytest.mark.parametrize("key,expected", [
    ("", 0),
    ("hello", 99162322),
    ("my-group", -1906497762),
    ("polygenelubricants", -(1 << 31)),  # Integer.MIN_VALUE: Utils.abs maps it to 0
    ("\U0001F600", 1772899),  # a surrogate pair: two UTF-16 code units
    ("é", 233),
])
def test_java_string_hash_code(key, expected):
    assert java_string_hash_code(key) == expected


def test_partition_for():
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("my-group", 50) == 1906497762 % 50 == 12


@given(st.text())
def test_partition_for_is_in_range_and_matches_the_formula(key):
    h = java_string_hash_code(key)
    assert -(1 << 31) <= h < (1 << 31)
    p = partition_for(key, 50)
    assert 0 <= p < 50
    assert p == (0 if h == -(1 << 31) else abs(h)) % 50


# ---------------------------------------------------------------------------------------------------
# FindCoordinator


def _locate(topic, partition):
    return (7, "broker-7", 9092) if partition % 2 == 0 else None


def test_find_coordinator_v0_to_v3_and_batched_v4():
    h = Harness()
    group = next(g for g in (f"g{i}" for i in range(100)) if h.gc.partition_for(g) % 2 == 0)
    odd = next(g for g in (f"g{i}" for i in range(100)) if h.gc.partition_for(g) % 2 == 1)
    for version in range(4):
        response = h.gc.find_coordinator(FindCoordinatorRequest(key=group), version, _locate)
        assert (response.error_code, response.node_id, response.host, response.port) == (0, 7, "broker-7", 9092)
        response.encode(version)
        missing = h.gc.find_coordinator(FindCoordinatorRequest(key=odd), version, _locate)
        assert (missing.error_code, missing.node_id, missing.port) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1)
        missing.encode(version)
    batched = h.gc.find_coordinator(FindCoordinatorRequest(coordinator_keys=[group, odd]), 4, _locate)
    assert [(c.key, c.error_code, c.node_id) for c in batched.coordinators] == [
        (group, 0, 7), (odd, ErrorCode.COORDINATOR_NOT_AVAILABLE, -1)]
    batched.encode(6)


def test_find_coordinator_key_types():
    h = Harness(transaction_state_log_num_partitions=10)
    seen = []
    h.gc.find_coordinator(FindCoordinatorRequest(key_type=1, coordinator_keys=["txn"]), 4,
                          lambda topic, p: seen.append((topic, p)) or (1, "h", 1))
    assert seen == [("__transaction_state", partition_for("txn", 10))]
    bad = h.gc.find_coordinator(FindCoordinatorRequest(key_type=2, coordinator_keys=["x"]), 4, _locate)
    assert bad.coordinators[0].error_code == ErrorCode.INVALID_REQUEST


# ---------------------------------------------------------------------------------------------------
# DescribeGroups, ListGroups, DeleteGroups


def test_describe_groups():
    h = Harness()
    (a, b), generation = form_group(h, "g", 2)
    h.join_member("rebalancing")
    response = h.gc.describe_groups(DescribeGroupsRequest(groups=["g", "rebalancing", "missing"]), 5, h.now)
    g, rebalancing, missing = response.groups
    assert (g.error_code, g.group_state, g.protocol_type, g.protocol_data) == (0, "Stable", "consumer", "range")
    assert [(m.member_id, m.client_id, m.client_host, m.member_assignment) for m in g.members] == [
        (a, "c0", "/127.0.0.1", a.encode()), (b, "c1", "/127.0.0.1", b.encode())]
    assert all(m.member_metadata for m in g.members)
    assert g.authorized_operations == INT32_MIN
    assert (rebalancing.group_state, rebalancing.protocol_data) == ("PreparingRebalance", "")
    assert all(m.member_metadata == b"" and m.member_assignment == b"" for m in rebalancing.members)
    assert (missing.error_code, missing.group_state) == (0, "Dead")
    response.encode(5)
    v6 = h.gc.describe_groups(DescribeGroupsRequest(groups=["missing"], include_authorized_operations=True), 6, h.now)
    assert v6.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND and v6.groups[0].error_message
    assert v6.groups[0].group_state == "Dead"  # as Kafka 4.4 answers (tests/integration/test_kafka_differential.py)
    asked = h.gc.describe_groups(DescribeGroupsRequest(groups=["g"], include_authorized_operations=True), 3, h.now)
    assert asked.groups[0].authorized_operations != INT32_MIN
    for version in range(7):
        h.gc.describe_groups(DescribeGroupsRequest(groups=["g", "missing"]), version, h.now).encode(version)


def test_list_groups_with_state_and_type_filters():
    h = Harness()
    form_group(h, "stable", 1)
    h.join_member("preparing")
    h.commit("simple", {("t", 0): 1})
    listed = {g.group_id: (g.protocol_type, g.group_state, g.group_type)
              for g in h.gc.list_groups(ListGroupsRequest(), 5, h.now).groups}
    assert listed == {"stable": ("consumer", "Stable", "classic"),
                      "preparing": ("consumer", "PreparingRebalance", "classic"),
                      "simple": ("", "Empty", "classic")}
    filtered = h.gc.list_groups(ListGroupsRequest(states_filter=["stable", "EMPTY"]), 4, h.now)
    assert sorted(g.group_id for g in filtered.groups) == ["simple", "stable"]
    by_type = h.gc.list_groups(ListGroupsRequest(types_filter=["Consumer"]), 5, h.now)
    assert by_type.groups == []
    for version in range(6):
        h.gc.list_groups(ListGroupsRequest(), version, h.now).encode(version)


def test_delete_groups():
    h = Harness()
    (a,), generation = form_group(h, "busy", 1)
    h.commit("idle", {("t", 0): 1, ("t", 1): 2})
    response = h.gc.delete_groups(DeleteGroupsRequest(groups_names=["idle", "busy", "missing", ""]), 2, h.now).result()
    assert [(x.group_id, x.error_code) for x in response.results] == [
        ("idle", 0), ("busy", ErrorCode.NON_EMPTY_GROUP), ("missing", ErrorCode.GROUP_ID_NOT_FOUND),
        ("", ErrorCode.INVALID_GROUP_ID)]
    assert h.fetch("idle")[1] == {}
    tombstones = [rec for rec in h.records("idle") if rec.value is None]
    assert {(rec.type, getattr(rec.key, "partition", None)) for rec in tombstones} >= {
        (r.RecordType.OFFSET_COMMIT, 0), (r.RecordType.OFFSET_COMMIT, 1), (r.RecordType.GROUP_METADATA, None)}
    assert "idle" not in [g.group_id for g in h.gc.list_groups(ListGroupsRequest(), 5, h.now).groups]
    h.leave("busy", (a, None))
    assert h.gc.delete_groups(DeleteGroupsRequest(groups_names=["busy"]), 2, h.now).result().results[0].error_code == 0
    reloaded = h.reload()
    assert reloaded.list_groups(ListGroupsRequest(), 5, h.now).groups == []


# ---------------------------------------------------------------------------------------------------
# Records and the runtime's Deferred


def test_record_layouts_match_kafka():
    key, value = r.serialize(r.offset_commit_record("g", "t", 3, 42, 5, "m", 1000))
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    assert value == (b"\x00\x03" + (42).to_bytes(8, "big") + (5).to_bytes(4, "big") + b"\x00\x01m"
                     + (1000).to_bytes(8, "big"))
    key, value = r.serialize(r.offset_commit_record("g", "t", 3, 42, 5, "m", 1000, expire_timestamp_ms=2000))
    assert value == (b"\x00\x01" + (42).to_bytes(8, "big") + b"\x00\x01m" + (1000).to_bytes(8, "big")
                     + (2000).to_bytes(8, "big"))
    key, value = r.serialize(r.group_metadata_tombstone("grp"))
    assert (key, value) == (b"\x00\x02\x00\x03grp", None)


@given(st.sampled_from([0, 1, 2, 3, 4]), st.text(max_size=5), st.integers(-1, 2**31 - 1), st.binary(max_size=8))
def test_group_metadata_value_round_trips_every_version(version, text, number, blob):
    member = r.GroupMetadataValue.MemberMetadata(
        member_id=text, group_instance_id=text if version >= 3 else None, client_id=text, client_host=text,
        rebalance_timeout=number if version >= 1 else 0, session_timeout=number, subscription=blob, assignment=blob)
    value = r.GroupMetadataValue(protocol_type=text, generation=number, protocol=None, leader=text,
                                 current_state_timestamp=number if version >= 2 else -1, members=[member])
    record = r.CoordinatorRecord(r.RecordType.GROUP_METADATA, r.GroupMetadataKey(group=text), value, version)
    decoded = r.deserialize(*r.serialize(record))
    assert decoded.value == value and decoded.key == record.key and decoded.value_version == version


def test_unknown_record_types_are_skipped_and_corrupt_ones_refused():
    assert r.deserialize(b"\x00\x63whatever", b"\x00\x00") is None  # a record type we do not know
    with pytest.raises(r.CorruptCoordinatorRecordError):
        r.deserialize(b"\x00\x01\x00", b"")
    key, value = r.serialize(r.offset_commit_record("g", "t", 0, 1, -1, "", 0))
    with pytest.raises(r.CorruptCoordinatorRecordError):
        r.deserialize(key, b"\x00\x09" + value[2:])


def test_consumer_group_records_round_trip():
    tid = uuid.UUID(int=5)
    for record in (
        r.consumer_group_epoch_record("g", 3, -7),
        r.target_assignment_epoch_record("g", 3),
        r.target_assignment_member_record("g", "m", {tid: frozenset({2, 0})}),
        r.current_assignment_record("g", "m", 3, 2, 1, {tid: frozenset({0})}, {tid: frozenset({2})}),
        r.current_assignment_tombstone("g", "m"),
    ):
        decoded = r.deserialize(*r.serialize(record))
        assert (decoded.type, decoded.key, decoded.value) == (record.type, record.key, record.value)


def test_deferred_and_gather():
    d: Deferred[int] = Deferred()
    seen = []
    d.add_callback(lambda x: seen.append(x.result()))
    mapped = d.then(lambda v: v + 1)
    assert d.complete(1) and not d.complete(2)
    assert seen == [1] and mapped.result() == 2
    failed: Deferred[int] = Deferred()
    recovered = failed.then(lambda v: v, lambda e: str(e))
    failed.fail(ValueError("boom"))
    assert recovered.result() == "boom"
    with pytest.raises(ValueError):
        failed.result()
    a, b = Deferred(), Deferred()
    both = gather([a, b])
    b.complete("b")
    assert not both.done
    a.complete("a")
    assert both.result() == ["a", "b"]
    assert gather([]).result() == []
