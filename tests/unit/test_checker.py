"""The delivery checker (tests/checker.py) finds each kind of broken promise, and nothing in a clean run."""

from __future__ import annotations

from tests.checker import (
    LsoWatch,
    Seen,
    Sent,
    Tagged,
    TxnJournal,
    check,
    check_transactions,
    hanging_partitions,
    stuck_transactions,
)


def run(n: int = 6) -> tuple[list[Sent], list[Seen]]:
    sent = [Sent("t", i % 2, i // 2, b"v%d" % i, producer="p", sequence=i) for i in range(n)]
    seen = [Seen(s.topic, s.partition, s.offset, s.value) for s in sent]
    return sent, seen


def test_a_clean_run_has_no_problems():
    sent, seen = run()
    report = check(sent, seen)
    assert report.problems() == {} and report.acknowledged == report.consumed == 6
    assert "0 lost" in report.summary()


def test_each_broken_promise_is_reported():
    sent, seen = run()
    lost = seen.pop(0)  # never consumed
    seen.append(Seen("t", 1, 0, b"v1"))  # read twice at its own offset: not a duplicate
    seen.append(Seen("t", 1, 9, b"v3"))  # the same value at a second offset: a duplicate
    seen.append(Seen("t", 0, 1, b"other"))  # another value at an offset already read: offset reused
    report = check(sent, seen, aborted=[b"v5"])
    problems = report.problems()
    assert [s.value for s in problems["lost"]] == [lost.value]
    assert [(a.offset, b.offset) for a, b in problems["duplicated"]] == [(1, 9)]
    assert [(a.value, b.value) for a, b in problems["offset_reused"]] == [(b"v2", b"other")]
    assert [s.value for s in problems["aborted_read"]] == [b"v5"]
    assert "duplicated" not in report.problems(allow_duplicates=True)


def test_moved_and_reordered_acknowledgements():
    sent, seen = run()
    seen[2] = Seen("t", 0, 7, b"v2")  # acknowledged at offset 1, consumed at 7
    report = check(sent, seen)
    assert [(s.offset, g.offset) for s, g in report.offset_changed] == [(1, 7)]
    swapped = [Sent("t", 0, 1, b"a", "p", 0), Sent("t", 0, 0, b"b", "p", 1)]
    report = check(swapped, [Seen("t", 0, 1, b"a"), Seen("t", 0, 0, b"b")])
    assert len(report.reordered) == 1


# -- the transactional checker


def tag(value: bytes) -> Tagged:
    """Values as the fault test writes them: <source>|<instance>.<txn>.<index>."""
    source, _, where = value.partition(b"|")
    instance, txn, index = (int(x) for x in where.split(b"."))
    return Tagged(f"{instance}.{txn}", "app", (instance, txn, index), source)


def txn_run():
    """Instance 1 commits t0 (inputs a, b) and aborts t1 (c); instance 2 commits t0 (c) and is killed in t1 (d)."""
    journal = TxnJournal()
    journal.written = {"1.0": [b"a|1.0.0", b"b|1.0.1"], "1.1": [b"c|1.1.0"], "2.0": [b"c|2.0.0"], "2.1": [b"d|2.1.0"]}
    journal.committed = {"1.0", "2.0"}
    journal.aborted = {"1.1"}
    seen = [Seen("out", 0, 0, b"a|1.0.0"), Seen("out", 0, 1, b"b|1.0.1"), Seen("out", 0, 4, b"c|2.0.0"),
            Seen("out", 0, 6, b"d|2.1.0")]
    return journal, seen


def test_a_clean_transactional_run_has_no_problems():
    journal, seen = txn_run()
    report = check_transactions(seen + seen[:1], journal, tag, inputs=[b"a", b"b", b"c", b"d"])
    assert report.problems() == {}, report.summary()
    assert (report.consumed, report.committed, report.aborted, report.unknown, report.unknown_visible) == (4, 2, 1, 1, 1)


def test_each_broken_transactional_promise_is_reported():
    journal, seen = txn_run()
    seen = [r for r in seen if r.value != b"b|1.0.1"]  # half of a committed transaction
    seen.append(Seen("out", 0, 2, b"c|1.1.0"))  # a record of an aborted transaction
    seen.append(Seen("out", 1, 0, b"d|2.1.0"))  # input d made into a second record
    seen.append(Seen("out", 1, 1, b"a|1.0.0"))  # an older record after a newer one in partition 1
    seen.append(Seen("out", 1, 2, b"e|3.0.0"))  # a record of a transaction nobody journalled
    report = check_transactions(seen, journal, tag, inputs=[b"a", b"b", b"c", b"d", b"e"])
    problems = report.problems()
    assert [r.value for r in problems["aborted_read"]] == [b"c|1.1.0"]
    assert [r.value for r in problems["stray"]] == [b"e|3.0.0"]
    assert ("1.0", 1, 2) in problems["partial"]
    assert problems["lost"] == [b"b|1.0.1"]
    assert sorted(r.value for pair in problems["duplicated"] for r in pair) == [b"a|1.0.0", b"a|1.0.0", b"c|1.1.0",
                                                                                 b"c|2.0.0", b"d|2.1.0", b"d|2.1.0"]
    assert problems["missing_input"] == [b"b"]
    assert [(a.value, b.value) for a, b in problems["reordered"]] == [(b"d|2.1.0", b"a|1.0.0")]


def test_hanging_partitions_and_stuck_transactions():
    assert hanging_partitions({0: 10, 1: 4}, {0: 10, 1: 7}) == {1: (4, 7)}
    listed = [("a", "Ongoing", 1000, 5000), ("b", "PrepareCommit", 9000, 5000), ("c", "CompleteCommit", 0, 10),
              ("d", "Ongoing", 8000, 5000)]
    assert [t[0] for t in stuck_transactions(listed, now_ms=12_001, slack_ms=1000)] == ["a"]


def test_lso_watch_measures_how_long_the_lso_stood_still_behind_the_hw():
    watch = LsoWatch()
    watch.observe(0.0, 0, 5, 9)
    watch.observe(4.0, 0, 5, 12)  # still at 5: stalled 4 s
    watch.observe(5.0, 0, 12, 12)  # caught up
    watch.observe(6.0, 0, 12, 15)
    watch.observe(7.0, 0, 14, 15)  # moved on: a new stall starts
    watch.observe(8.5, 0, 14, 16)
    watch.observe(1.0, 1, 3, 3)
    assert watch.longest == {0: 4.0} and watch.longest_s() == 4.0
