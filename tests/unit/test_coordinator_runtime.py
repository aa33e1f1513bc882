"""The coordinator runtime on its own: a toy coordinator's records, and `on_committed` driven by the writer."""

from __future__ import annotations

from odradek.coordinator.runtime import CoordinatorRuntime, InMemoryPartitionWriter, Result
from odradek.purgatory.timing_wheel import Timer


class ToyShard:
    """A shard whose replicated state is the list of values replayed."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.values: list[str] = []

    def replay(self, record: str) -> None:
        self.values.append(record)

    def on_loaded(self, now_ms: int) -> None:
        pass

    def on_unloaded(self) -> None:
        pass


def serialize(record: str) -> tuple[bytes, bytes]:
    return record.encode(), b"v"


def deserialize(key: bytes | None, value: bytes | None) -> str | None:
    return None if key == b"skip" else key.decode()


def runtime(writer) -> CoordinatorRuntime[ToyShard]:
    return CoordinatorRuntime(writer, ToyShard, Timer(start_ms=0), serialize=serialize, deserialize=deserialize)


def put(*values: str, seen: list | None = None):
    """An op writing `values`; its callback notes what the shard held once they were durable."""

    def op(shard: ToyShard) -> Result:
        callbacks = [] if seen is None else [lambda error: seen.append(list(shard.values))]
        return Result(list(values), response=values[-1], callbacks=callbacks)

    return op


def test_the_runtime_loads_and_writes_through_the_coordinators_serde():
    writer = InMemoryPartitionWriter()
    writer.logs[0] = [(b"a", b"v"), (b"skip", b"v"), (b"b", b"v")]
    rt = runtime(writer)
    assert rt.load(0, 0).values == ["a", "b"]  # a record deserialize skips is not replayed
    assert rt.write(0, put("c"), 0).result() == "c"
    assert writer.logs[0][-1] == (b"c", b"v")
    assert rt.shard(0).values == ["a", "b", "c"]


def test_the_writers_high_watermark_listener_releases_held_responses():
    writer = InMemoryPartitionWriter(commit_later=True)
    rt = runtime(writer)
    rt.load(0, 0)
    rt.load(1, 0)
    assert set(writer.listeners) == {0, 1}
    first = rt.write(0, put("a"), 0)
    second = rt.write(0, put("b"), 0)
    other = rt.write(1, put("x"), 0)
    assert not (first.done or second.done or other.done)
    writer.commit(0, 1)  # the high watermark passed the first write only
    assert first.result() == "a" and not second.done and not other.done
    writer.commit(0)
    assert second.result() == "b" and not other.done
    rt.unload(1)
    assert set(writer.listeners) == {0}  # unloading deregisters the partition's listener
    assert other.failed_with is not None


def test_a_commit_heard_inside_the_append_is_acted_on_after_the_replay():
    """With one replica the high watermark moves inside the append: what it releases must see the shard
    with the write's records replayed."""

    class EagerWriter(InMemoryPartitionWriter):
        def append(self, partition, records, now_ms):
            end = super().append(partition, records, now_ms)
            if self.eager:
                self.commit(partition)  # the listener fires before append returns
                return None
            return end

    writer = EagerWriter(commit_later=True)
    writer.eager = False
    rt = runtime(writer)
    rt.load(0, 0)
    seen: list = []
    held = rt.write(0, put("a", seen=seen), 0)
    assert not held.done and seen == []
    writer.eager = True
    now = rt.write(0, put("b"), 0)
    assert held.result() == "a" and now.result() == "b"
    assert seen == [["a", "b"]]  # released after "b" was replayed, not in the middle of its append


def test_a_write_released_below_min_isr_fails_after_append_and_keeps_the_committed_records():
    """The ISR shrank below min.insync.replicas after the append and the high watermark moved over the smaller
    ISR: the held write is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND (callbacks hear it), as Kafka's acks=all
    DelayedProduce answers. Its records are committed, so the shard keeps them: it stays the replay of its log."""
    from odradek.protocol.errors import ErrorCode

    writer = InMemoryPartitionWriter(commit_later=True)
    under = {0: False}
    rt = CoordinatorRuntime(writer, ToyShard, Timer(start_ms=0), serialize=serialize, deserialize=deserialize,
                            under_min_isr=lambda p: under[p])
    rt.load(0, 0)
    heard: list = []

    def noted(op):
        def wrapped(shard):
            result = op(shard)
            result.callbacks.append(heard.append)
            return result
        return wrapped

    first = rt.write(0, noted(put("a")), 0)
    no_records = rt.write(0, lambda shard: Result([], response="read"), 0)  # waits for "a" to be committed
    later = rt.write(0, put("b"), 0)
    under[0] = True  # the ISR shrank below min.insync.replicas; the high watermark passes "a" only
    writer.commit(0, 1)
    assert first.failed_with is not None
    assert first.failed_with.error_code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    assert len(heard) == 1 and heard[0] is first.failed_with
    assert no_records.result() == "read"  # it reports on committed state: nothing of its own failed
    assert not later.done
    assert rt.shard(0).values == ["a", "b"]
    reloaded = runtime(InMemoryPartitionWriter())
    reloaded._writer.logs[0] = list(writer.logs[0])
    assert reloaded.load(0, 0).values == rt.shard(0).values  # the shard is still the replay of its log

    under[0] = False  # the ISR is back: the rest is answered as usual
    writer.commit(0)
    assert later.result() == "b"
    assert rt.write(0, put("c"), 0) is not None and writer.logs[0][-1] == (b"c", b"v")


def test_without_a_min_isr_test_released_writes_succeed():
    writer = InMemoryPartitionWriter(commit_later=True)
    rt = runtime(writer)
    rt.load(0, 0)
    held = rt.write(0, put("a"), 0)
    writer.commit(0)
    assert held.result() == "a"
