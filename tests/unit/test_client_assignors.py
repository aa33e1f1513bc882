"""Range, round-robin and cooperative-sticky assignors, and the consumer protocol blobs."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.client.assignors import (
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from odradek.client.cluster import TopicPartition as TP


def subs(members, topics):
    return {m: Subscription(list(topics)) for m in members}


def test_range_matches_java():
    # Java's RangeAssignorTest#testTwoConsumersTwoTopicsSixPartitions: 3 partitions each, two consumers.
    result = RangeAssignor().assign({"t1": 3, "t2": 3}, subs(["c1", "c2"], ["t1", "t2"]))
    assert result == {
        "c1": [TP("t1", 0), TP("t1", 1), TP("t2", 0), TP("t2", 1)],
        "c2": [TP("t1", 2), TP("t2", 2)],
    }


def test_range_only_subscribed_topics():
    s = {"a": Subscription(["t1"]), "b": Subscription(["t1", "t2"])}
    result = RangeAssignor().assign({"t1": 2, "t2": 2}, s)
    assert result == {"a": [TP("t1", 0)], "b": [TP("t1", 1), TP("t2", 0), TP("t2", 1)]}


def test_roundrobin_matches_java():
    # Java's RoundRobinAssignorTest#testTwoConsumersTwoTopicsSixPartitions.
    result = RoundRobinAssignor().assign({"t1": 3, "t2": 3}, subs(["c1", "c2"], ["t1", "t2"]))
    assert result == {
        "c1": [TP("t1", 0), TP("t1", 2), TP("t2", 1)],
        "c2": [TP("t1", 1), TP("t2", 0), TP("t2", 2)],
    }


def test_sticky_balances_a_fresh_group():
    result = CooperativeStickyAssignor().assign({"t": 7}, subs(["a", "b", "c"], ["t"]))
    sizes = sorted(len(v) for v in result.values())
    assert sizes == [2, 2, 3]
    assert sorted(itertools.chain(*result.values())) == [TP("t", p) for p in range(7)]


def test_cooperative_sticky_keeps_owned_and_withholds_moving_partitions():
    owned = [TP("t", p) for p in range(4)]
    s = {"a": Subscription(["t"], owned, generation_id=1), "b": Subscription(["t"])}
    first = CooperativeStickyAssignor().assign({"t": 4}, s)
    # b gets nothing yet: the two partitions moving to it must first be revoked by a.
    assert len(first["a"]) == 2 and set(first["a"]) <= set(owned)
    assert first["b"] == []
    s = {"a": Subscription(["t"], first["a"], generation_id=2), "b": Subscription(["t"], [], generation_id=2)}
    second = CooperativeStickyAssignor().assign({"t": 4}, s)
    assert second["a"] == first["a"]
    assert sorted(second["b"]) == sorted(set(owned) - set(first["a"]))


def test_sticky_prefers_higher_generation_on_conflicting_claims():
    s = {"a": Subscription(["t"], [TP("t", 0)], generation_id=1),
         "b": Subscription(["t"], [TP("t", 0)], generation_id=3)}
    result = CooperativeStickyAssignor().assign({"t": 2}, s)
    assert TP("t", 0) in result["b"]


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["t1", "t2", "t3"]), st.integers(1, 12), min_size=1),
    st.lists(st.sampled_from(["m1", "m2", "m3", "m4", "m5"]), min_size=1, max_size=5, unique=True),
    st.randoms(use_true_random=False),
)
def test_every_assignor_assigns_each_partition_once(partitions, members, rnd):
    topics = sorted(partitions)
    subscriptions = {m: Subscription(topics) for m in members}
    for assignor in (RangeAssignor(), RoundRobinAssignor(), CooperativeStickyAssignor()):
        result = assignor.assign(partitions, subscriptions)
        flat = list(itertools.chain(*result.values()))
        assert sorted(flat) == sorted(TP(t, p) for t, n in partitions.items() for p in range(n))
    sticky = CooperativeStickyAssignor().assign(partitions, subscriptions)
    sizes = [len(v) for v in sticky.values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 20), st.integers(1, 6), st.integers(1, 6), st.randoms(use_true_random=False))
def test_cooperative_sticky_never_double_assigns(n_partitions, n_before, n_after, rnd):
    members_before = [f"m{i}" for i in range(n_before)]
    first = CooperativeStickyAssignor().assign({"t": n_partitions}, subs(members_before, ["t"]))
    members_after = [f"m{i}" for i in range(n_after)]
    s = {m: Subscription(["t"], first.get(m, []), generation_id=1) for m in members_after}
    second = CooperativeStickyAssignor().assign({"t": n_partitions}, s)
    for m, tps in second.items():
        for tp in tps:
            owner = next((o for o, owned in first.items() if tp in owned and o in s), None)
            assert owner in (None, m)


def test_subscription_round_trip():
    sub = Subscription(["b", "a"], [TP("a", 1), TP("a", 0), TP("b", 2)], generation_id=5, user_data=b"u")
    back = decode_subscription(encode_subscription(sub))
    assert back.topics == ["a", "b"]
    assert sorted(back.owned_partitions) == sorted(sub.owned_partitions)
    assert back.generation_id == 5 and back.user_data == b"u"
    v0 = decode_subscription(encode_subscription(sub, version=0))
    assert v0.topics == ["a", "b"] and v0.owned_partitions == []


def test_newer_subscription_versions_read_as_v3():
    data = bytearray(encode_subscription(Subscription(["t"], [TP("t", 0)], 2)))
    data[0:2] = (9).to_bytes(2, "big")
    assert decode_subscription(bytes(data) + b"future-fields").topics == ["t"]


def test_assignment_round_trip():
    tps = [TP("x", 3), TP("x", 1), TP("y", 0)]
    assert sorted(decode_assignment(encode_assignment(tps))) == sorted(tps)
    assert decode_assignment(b"") == []
