"""Compaction: latest value per key, stable offsets, tombstone horizons, crash safety, concurrency."""

from __future__ import annotations

import os
import random
import tempfile
import threading

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.protocol.compression import GZIP, LZ4
from odradek.protocol.records import ATTR_DELETE_HORIZON, build_batch, iter_batches, iter_records
from odradek.storage.cleaner import Cleaner, cleanable_range
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.log_manager import LogManager
from odradek.storage.names import TopicPartition
from tests.harness.crash import Crash, crash_after

NOW = 1_700_000_000_000
DAY = 24 * 3600 * 1000
CONFIG = LogConfig(cleanup_policy="compact", segment_bytes=1200, index_interval_bytes=100, segment_index_bytes=1024,
                   min_cleanable_dirty_ratio=0.0)


def kv_batch(pairs, ts=NOW, **kw) -> bytearray:
    return bytearray(build_batch([(k, v, None, ts) for k, v in pairs], **kw))


def all_batches(log: Log):
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        read = log.read(offset, 1 << 20)
        chunk = b"".join(os.pread(r.fd, r.length, r.position) for r in read.regions)
        headers = [(p, h) for p, h in iter_batches(chunk)]
        if not headers:
            break
        out += [(h, chunk[p : p + h.size]) for p, h in headers]
        offset = headers[-1][1].next_offset
    return out


def all_records(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for h, b in all_batches(log) if h.records_count
            for r in iter_records(b, max_uncompressed_bytes=1 << 24)]


def fill(log: Log, ops, *, ts=NOW, per_batch=3):
    for i in range(0, len(ops), per_batch):
        log.append(kv_batch(ops[i : i + per_batch], ts=ts), leader_epoch=0, now_ms=ts)


keys = st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f", b"g"])
values = st.one_of(st.none(), st.binary(min_size=1, max_size=40))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(st.tuples(keys, values), min_size=1, max_size=120), per_batch=st.integers(1, 5),
       codec=st.sampled_from([0, GZIP, LZ4]))
def test_latest_value_per_key_survives_and_offsets_never_change(ops, per_batch, codec):
    with tempfile.TemporaryDirectory() as root:
        log = Log.open(os.path.join(root, "t-0"), CONFIG, now_ms=NOW)
        for i in range(0, len(ops), per_batch):
            log.append(kv_batch(ops[i : i + per_batch], compression=codec), leader_epoch=0, now_ms=NOW)
        before = all_records(log)
        end = log.log_end_offset
        result = Cleaner().clean(log, now_ms=NOW)
        after = all_records(log)
        assert log.log_end_offset == end
        assert set(after) <= set(before)
        cleaned_to = log.active_segment.base_offset
        if result is not None:
            assert result.end_offset == cleaned_to
        latest = {k: o for o, k, _ in before if o < cleaned_to}
        for offset, key, value in before:
            survives = (offset, key, value) in after
            if offset >= cleaned_to:
                assert survives
            else:
                assert survives == (latest[key] == offset)
        last_value = {k: v for _, k, v in before}
        assert {k: v for _, k, v in after} == last_value
        for header, _ in all_batches(log):
            assert header.compression == codec or header.records_count == 0


def test_tombstones_expire_on_schedule(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), CONFIG, now_ms=NOW)
    fill(log, [(b"a", b"1"), (b"b", b"2"), (b"a", None), (b"c", b"3")] * 5 + [(b"z", b"x")] * 40)
    Cleaner().clean(log, now_ms=NOW)
    assert (b"a", None) in [(k, v) for _, k, v in all_records(log)]
    horizons = [h.base_timestamp for h, _ in all_batches(log) if h.attributes & ATTR_DELETE_HORIZON]
    assert horizons == [NOW + DAY]
    assert log.latest_delete_horizon_ms == NOW + DAY

    Cleaner().clean(log, now_ms=NOW + DAY - 1)
    assert (b"a", None) in [(k, v) for _, k, v in all_records(log)]
    Cleaner().clean(log, now_ms=NOW + DAY)
    remaining = [(k, v) for _, k, v in all_records(log)]
    assert (b"a", None) not in remaining and (b"b", b"2") in remaining and (b"c", b"3") in remaining
    assert [r for r in all_records(log) if r[1] == b"b"][0][2] == b"2"


def test_min_compaction_lag_and_dirty_ratio(tmp_path):
    config = CONFIG.with_overrides(min_compaction_lag_ms=1000)
    log = Log.open(str(tmp_path / "t-0"), config, now_ms=NOW)
    for i in range(40):
        log.append(kv_batch([(b"k", b"%d" % i)], ts=NOW + i * 100), leader_epoch=0, now_ms=NOW + i * 100)
    cleanable = cleanable_range(log, NOW + 3000)
    assert 0 < cleanable.first_uncleanable_offset < log.active_segment.base_offset
    Cleaner().clean(log, now_ms=NOW + 3000)
    offsets = [o for o, _, _ in all_records(log)]
    assert all(o >= cleanable.first_uncleanable_offset for o in offsets[1:])
    assert len([o for o in offsets if o < cleanable.first_uncleanable_offset]) == 1


def test_an_emptied_batch_of_an_idempotent_producer_is_kept(tmp_path):
    directory = str(tmp_path / "t-0")
    log = Log.open(directory, CONFIG, now_ms=NOW)
    log.append(kv_batch([(b"a", b"1"), (b"b", b"1")], producer_id=7, producer_epoch=0, base_sequence=0),
               leader_epoch=0, now_ms=NOW)
    fill(log, [(b"a", b"2"), (b"b", b"2")] * 20)
    Cleaner().clean(log, now_ms=NOW)
    first = all_batches(log)[0][0]
    assert first.producer_id == 7 and first.records_count == 0 and first.last_offset == 1
    log.close()
    for name in os.listdir(directory):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(directory, name))
    again = Log.open(directory, CONFIG, now_ms=NOW)
    retry = again.append(kv_batch([(b"a", b"1"), (b"b", b"1")], producer_id=7, producer_epoch=0, base_sequence=0),
                         leader_epoch=0, now_ms=NOW)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (0, 1)
    assert not again.append(kv_batch([(b"c", b"1")], producer_id=7, producer_epoch=0, base_sequence=2),
                            leader_epoch=0, now_ms=NOW).duplicate


def test_a_log_truncated_during_cleaning_is_left_alone(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), CONFIG, now_ms=NOW)
    fill(log, [(b"k%d" % (i % 3), b"v%d" % i) for i in range(90)])
    generation = log.generation
    log.truncate_to(log.log_end_offset - 3)
    new = log.new_cleaned_segment(log.segments[0].base_offset, NOW)
    assert not log.replace_segments(new, log.segments[:1], generation)
    new.delete()
    assert not any(n.endswith(".cleaned") for n in os.listdir(log.directory))


def _build(directory: str) -> Log:
    log = Log.open(directory, CONFIG, now_ms=NOW)
    rng = random.Random(7)
    fill(log, [(b"k%d" % rng.randrange(6), None if rng.random() < 0.1 else b"v%d" % i) for i in range(150)])
    return log


def test_a_crash_at_any_step_of_cleaning_leaves_a_consistent_log(tmp_path, monkeypatch):
    reference = _build(str(tmp_path / "ref" / "t-0"))
    before = all_records(reference)
    end = reference.log_end_offset
    Cleaner().clean(reference, now_ms=NOW)
    cleaned = all_records(reference)
    latest = {k: v for _, k, v in before}
    steps = 0
    while True:
        steps += 1
        directory = str(tmp_path / f"run{steps}" / "t-0")
        log = _build(directory)
        with monkeypatch.context() as patch:
            state = crash_after(patch, steps)
            try:
                Cleaner().clean(log, now_ms=NOW)
            except Crash:
                pass
        finished = not state["crashed"]
        del log
        recovered = Log.open(directory, CONFIG, now_ms=NOW)
        records = all_records(recovered)
        assert set(cleaned) <= set(records) <= set(before), steps
        assert {k: v for _, k, v in records} == latest
        assert recovered.log_end_offset == end
        assert not any(n.endswith((".cleaned", ".swap")) for n in os.listdir(directory))
        assert recovered.append(kv_batch([(b"new", b"1")]), leader_epoch=0, now_ms=NOW).first_offset == end
        if finished:
            break
    assert steps > 10


def test_cleaning_in_a_thread_while_appending_and_reading(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), CONFIG, now_ms=NOW)
    fill(log, [(b"k%d" % (i % 10), b"v%d" % i) for i in range(600)])
    errors = []
    stop = threading.Event()

    def clean():
        try:
            while not stop.is_set():
                Cleaner(io_buffer_bytes=512).clean(log, now_ms=NOW)
        except BaseException as e:
            errors.append(e)

    worker = threading.Thread(target=clean)
    worker.start()
    try:
        for i in range(300):
            log.append(kv_batch([(b"k%d" % (i % 10), b"w%d" % i)]), leader_epoch=0, now_ms=NOW)
            if i % 10 == 0:
                offset = log.log_start_offset
                while offset < log.log_end_offset:
                    read = log.read(offset, 4096)
                    data = b"".join(os.pread(r.fd, r.length, r.position) for r in read.regions)
                    headers = [h for _, h in iter_batches(data)]
                    assert headers
                    offset = headers[-1].next_offset
    finally:
        stop.set()
        worker.join()
    assert not errors
    Cleaner().clean(log, now_ms=NOW)
    last = {k: v for _, k, v in all_records(log)}
    assert last == {b"k%d" % k: b"w%d" % (290 + k) for k in range(10)}


def test_log_manager_cleans_the_filthiest_log_above_its_ratio(tmp_path):
    config = CONFIG.with_overrides(min_cleanable_dirty_ratio=0.5)
    manager = LogManager(str(tmp_path / "data"), now_ms=NOW, default_config=config)
    hot = manager.get_or_create_log(TopicPartition("hot", 0), now_ms=NOW)
    cold = manager.get_or_create_log(TopicPartition("cold", 0), now_ms=NOW)
    fill(hot, [(b"k", b"v%d" % i) for i in range(200)])
    fill(cold, [(b"k%d" % i, b"v") for i in range(3)])
    result = manager.maybe_clean(NOW)
    assert result is not None and hot.cleaner_offset == hot.active_segment.base_offset
    assert manager.maybe_clean(NOW) is None
    manager.close()
    again = LogManager(str(tmp_path / "data"), now_ms=NOW, default_config=config)
    assert again.get_log(TopicPartition("hot", 0)).cleaner_offset == result.end_offset
    again.close()


def test_compact_and_delete_policies_together(tmp_path):
    config = CONFIG.with_overrides(cleanup_policy="compact,delete", retention_ms=1000)
    log = Log.open(str(tmp_path / "t-0"), config, now_ms=NOW)
    fill(log, [(b"k%d" % (i % 4), b"v%d" % i) for i in range(120)])
    Cleaner().clean(log, now_ms=NOW)
    assert log.delete_old_segments(NOW + 5000) > 0
    assert log.log_start_offset == log.segments[0].base_offset


def test_max_compaction_lag_forces_cleaning_below_the_ratio(tmp_path):
    config = CONFIG.with_overrides(min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=60_000)
    manager = LogManager(str(tmp_path / "data"), now_ms=NOW, default_config=config)
    log = manager.get_or_create_log(TopicPartition("t", 0), now_ms=NOW)
    fill(log, [(b"k%d" % (i % 30), b"v") for i in range(60)])
    Cleaner().clean(log, now_ms=NOW)
    fill(log, [(b"k1", b"w")] * 60, ts=NOW + 1000)
    assert manager.maybe_clean(NOW + 2000) is None
    result = manager.maybe_clean(NOW + 62_000)
    assert result is not None and result.records_removed > 0
    manager.close()
