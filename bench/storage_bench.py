"""Storage throughput next to a ceiling measured in the same run.

    python bench/storage_bench.py [--total-mib 64] [--partitions 10000]

`run(tmpdir)` returns a dict:

- raw_write_mb_s: plain os.write of the same bytes to one file (the ceiling for appends);
- append_16k_mb_s / append_1m_mb_s: Log.append of 16 KiB and 1 MiB batches (validation with CRC-32C,
  producer-state checks, offset stamping, index upkeep, one write per append);
- raw_read_mb_s: os.sendfile of the log files to /dev/null (the ceiling for reads);
- read_mb_s: Log.read (index lookups, whole-batch cut) plus os.sendfile of the returned regions, as a
  fetch would serve them; read_lookups_per_s: Log.read calls alone;
- open_10k_partitions_s: LogManager start on a directory of `partitions` partitions after a clean
  shutdown (each a copy of one small template partition: log, indexes, producer snapshot, leader-epoch
  checkpoint). Building and removing that directory takes longer than opening it.

Nothing here asserts a time; compare each figure with its ceiling.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

from odradek.storage.checkpoints import OffsetCheckpointFile
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.log_manager import LogManager
from odradek.protocol.records import build_batch, read_batch_header
from odradek.storage.names import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT, TopicPartition

NOW = 1_700_000_000_000
MIB = 1 << 20


def _batch(batch_bytes: int) -> bytearray:
    record = 1024 if batch_bytes >= 16 * 1024 else 128
    count = max(1, (batch_bytes - 100) // (record + 24))
    payload = os.urandom(record)
    return bytearray(build_batch([(b"key-%d" % i, payload, None, NOW) for i in range(count)]))


def _mb_s(nbytes: int, seconds: float) -> float:
    return round(nbytes / MIB / seconds, 1) if seconds > 0 else float("inf")


def _raw_write(path: str, buf: bytes, count: int) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(count):
            os.write(fd, buf)
        return time.perf_counter() - start
    finally:
        os.close(fd)


def _append(directory: str, buf: bytearray, count: int) -> tuple[float, Log]:
    log = Log.open(directory, LogConfig(segment_bytes=256 * MIB), now_ms=NOW)
    start = time.perf_counter()
    for _ in range(count):
        log.append(buf, leader_epoch=0, now_ms=NOW)
    return time.perf_counter() - start, log


def _read(log: Log, max_bytes: int, batch_bytes: int, batch_records: int) -> tuple[float, float, int, float]:
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        start = time.perf_counter()
        offset, total = 0, 0
        while offset < log.log_end_offset:
            read = log.read(offset, max_bytes)
            for region in read.regions:
                sent = 0
                while sent < region.length:
                    sent += os.sendfile(null, region.fd, region.position + sent, region.length - sent)
                total += region.length
            offset = read.first_offset + read.size // batch_bytes * batch_records
        read_s = time.perf_counter() - start

        start = time.perf_counter()
        offset, calls = 0, 0
        while offset < log.log_end_offset:
            read = log.read(offset, max_bytes)
            offset = read.first_offset + read.size // batch_bytes * batch_records
            calls += 1
        lookups_per_s = calls / (time.perf_counter() - start)

        start = time.perf_counter()
        for segment in log.segments:
            sent = 0
            while sent < segment.size:
                sent += os.sendfile(null, segment.file.fd, sent, segment.size - sent)
        raw_s = time.perf_counter() - start
        return read_s, raw_s, total, lookups_per_s
    finally:
        os.close(null)


def _open_many(root: str, partitions: int) -> float:
    template = os.path.join(root, "template-0")
    log = Log.open(template, LogConfig(), now_ms=NOW)
    log.append(_batch(1024), leader_epoch=0, now_ms=NOW)
    log.close()
    data = os.path.join(root, "many")
    LogManager(data, now_ms=NOW).close()
    files = {}
    for name in os.listdir(template):
        with open(os.path.join(template, name), "rb") as f:
            files[name] = f.read()
    points = {}
    for p in range(partitions):
        tp = TopicPartition("bench", p)
        target = os.path.join(data, tp.dir_name)
        os.mkdir(target)
        for name, content in files.items():
            fd = os.open(os.path.join(target, name), os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, content)
            os.close(fd)
        points[tp] = log.log_end_offset
    OffsetCheckpointFile(os.path.join(data, RECOVERY_POINT_CHECKPOINT)).write(points)
    open(os.path.join(data, CLEAN_SHUTDOWN_FILE), "wb").close()
    start = time.perf_counter()
    manager = LogManager(data, now_ms=NOW)
    elapsed = time.perf_counter() - start
    assert len(manager.logs) == partitions
    manager.abandon()
    return elapsed


def run(tmpdir: str, *, total_mib: int = 64, partitions: int = 10_000, rounds: int = 3) -> dict:
    """Best of `rounds` for each figure; raw writes and appends alternate so both see the same page cache."""
    results: dict = {"total_mib": total_mib, "partitions": partitions}
    for label, batch_bytes in (("16k", 16 * 1024), ("1m", MIB)):
        buf = _batch(batch_bytes)
        count = max(1, total_mib * MIB // len(buf))
        raw_s = append_s = read_s = raw_read_s = float("inf")
        lookups = 0.0
        for _ in range(rounds):
            raw_path = os.path.join(tmpdir, f"raw-{label}")
            raw_s = min(raw_s, _raw_write(raw_path, bytes(buf), count))
            os.unlink(raw_path)
            directory = os.path.join(tmpdir, f"append{label}-0")
            seconds, log = _append(directory, buf, count)
            append_s = min(append_s, seconds)
            if label == "16k":
                records = read_batch_header(buf).records_count
                r, raw_r, total, per_s = _read(log, MIB, len(buf), records)
                read_s, raw_read_s, lookups = min(read_s, r), min(raw_read_s, raw_r), max(lookups, per_s)
            log.release()
            shutil.rmtree(directory)
        nbytes = len(buf) * count
        results[f"batch_{label}_bytes"] = len(buf)
        results[f"raw_write_{label}_mb_s"] = _mb_s(nbytes, raw_s)
        results[f"append_{label}_mb_s"] = _mb_s(nbytes, append_s)
        results[f"append_{label}_batches_per_s"] = round(count / append_s)
        if label == "16k":
            results["read_mb_s"] = _mb_s(nbytes, read_s)
            results["raw_read_mb_s"] = _mb_s(nbytes, raw_read_s)
            results["read_lookups_per_s"] = round(lookups)
    results["open_10k_partitions_s"] = round(_open_many(tmpdir, partitions), 3)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--total-mib", type=int, default=64)
    parser.add_argument("--partitions", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="odradek-storage-bench-") as tmpdir:
        print(json.dumps(run(tmpdir, total_mib=args.total_mib, partitions=args.partitions), indent=2))


if __name__ == "__main__":
    main()
