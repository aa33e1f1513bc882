"""The delivery checker (tests/checker.py) finds each kind of broken promise, and nothing in a clean run."""

from __future__ import annotations

from tests.checker import Seen, Sent, check


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
