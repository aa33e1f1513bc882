"""Share groups beside a classic consumer group on ONE partition, in the same run, on one broker process.

    python -m bench.share_bench [--records 200000] [--value-bytes 100] [--members 1,4,16] [--runs 1] [--json]
    python -m bench share ...            (the same, from the bench entry point)

One odradek broker; one topic with one partition, pre-filled with `--records` records by a confluent-kafka
producer with librdkafka's default batching (`linger.ms` 5, so batches of thousands of records: what a
Python producer writes). Then, one after the other on the same data:

- classic: a consumer group of one confluent-kafka `Consumer` (subscribe, auto commit) reads every record;
- share, for each member count of `--members`: a new share group (`share.auto.offset.reset=earliest`, set as
  a GROUP config before anyone joins) of that many confluent-kafka `ShareConsumer`s, each in its own process,
  in implicit acknowledgement mode (each poll accepts what the previous one returned; close accepts the
  rest), reads until the members together have every record.

Share consumers are started, subscribed and given their assignment (the group coordinator lists them all
with the partition) before they are told to poll: librdkafka fetches only when the application polls, so
nothing is acquired before the start. The classic consumer pauses its partition as it is assigned and
resumes it at the start, so that it prefetches nothing before. Rates are from the start signal to the last
record; a share run also reports its rate from the first record any member got to the last.

Reported per run: records/s; how many records each member got (min / max); the broker's CPU per
acknowledged record (utime + stime of the broker process from /proc/<pid>/stat, read before the start and
after the members closed, divided by the records accepted, from the broker's
`odradek_share_acknowledgements_total{type="accept"}`); and whether every record was accepted exactly
once: the members together received each offset of the partition once (no offset twice, none missing,
every delivery count 1) and the broker counted exactly `--records` accepts. The classic run's CPU is per
record consumed (its offset commits included). The consumers' own CPU (process time of each consumer
process from the start, summed) is reported per record too: on a small machine the clients, not the
broker, bound a 16-member run. Nothing here asserts a figure.

The producer's batches matter: while several members fetch the partition, a batch larger than a member's
max_records (librdkafka asks for 500) is cut at it, the rest going to the next member, and each member that
takes a part is sent, and decodes, the whole batch (replication/share/partition.py); the report gives the
log's batch count and the mean records per batch.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from array import array
from pathlib import Path

from .procs import REPO_ROOT, Server, free_port

DEFAULT_MEMBERS = (1, 4, 16)
DEADLINE_S = 600.0
_ACCEPTS = re.compile(r'^odradek_share_acknowledgements_total\{type="accept"\} ([0-9.e+]+)$', re.M)


# -- the consumers, each in a process of its own --------------------------------------------------------


def _share_member(bootstrap: str, group: str, topic: str, client_id: str, ready, go, stop, progress, results) -> None:
    from confluent_kafka import ShareConsumer

    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                              "share.acknowledgement.mode": "implicit", "log_level": 3})
    consumer.subscribe([topic])
    ready.release()
    go.wait()
    cpu0 = time.process_time()
    offsets = array("q")
    redelivered = 0
    first = last = 0.0
    while not stop.is_set():
        for m in consumer.poll(0.2) or ():
            if m.error() is not None:
                continue
            offsets.append(m.offset())
            if m.delivery_count() != 1:
                redelivered += 1
        if len(offsets) != progress.value:
            now = time.time()
            first = first or now
            last = now
            progress.value = len(offsets)
    consumer.close()  # implicit mode: accepts what the last poll returned
    results.put((client_id, offsets.tobytes(), redelivered, first, last, time.process_time() - cpu0))


def _classic_member(bootstrap: str, group: str, topic: str, records: int, ready, go, results) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "log_level": 3})
    assigned: list = []

    def on_assign(c, partitions) -> None:
        # Paused from its assignment until the start, so that nothing is prefetched before it.
        c.assign(partitions)
        c.pause(partitions)
        assigned.extend(partitions)

    consumer.subscribe([topic], on_assign=on_assign)
    while not assigned:
        consumer.poll(0.1)
    ready.release()
    go.wait()
    t_go, cpu0 = time.time(), time.process_time()
    consumer.resume(assigned)
    got = 0
    last = 0.0
    deadline = time.monotonic() + DEADLINE_S
    while got < records and time.monotonic() < deadline:
        for m in consumer.consume(10_000, 0.5):
            if m.error() is None:
                got += 1
        last = time.time()
    consumer.commit(asynchronous=False)
    consumer.close()
    results.put((got, t_go, last, time.process_time() - cpu0))


# -- the broker's side -----------------------------------------------------------------------------------


def _accepts(metrics_url: str) -> float:
    with urllib.request.urlopen(metrics_url, timeout=10) as r:
        m = _ACCEPTS.search(r.read().decode())
    return float(m.group(1)) if m else 0.0


def _cli(bootstrap: str, *args: str) -> str:
    env = dict(os.environ, ODRADEK_BOOTSTRAP_SERVERS=bootstrap, PYTHONUNBUFFERED="1")
    p = subprocess.run([sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=60,
                       env=env, cwd=REPO_ROOT)
    if p.returncode != 0:
        raise RuntimeError(f"odradek {' '.join(args)}: exit {p.returncode}: {p.stderr or p.stdout}")
    return p.stdout


def _assigned_members(bootstrap: str, group: str) -> int:
    """Members of the share group that hold an assignment, from `odradek group describe`."""
    try:
        out = _cli(bootstrap, "group", "describe", group)
    except RuntimeError:
        return 0
    lines = out.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith("MEMBER"))
    except StopIteration:
        return 0
    count = 0
    for line in lines[start + 1:]:
        if not line.strip() or line.startswith("TOPIC"):
            break
        if not line.rstrip().endswith(" -"):
            count += 1
    return count


def _log_batches(data_dir: Path, topic: str) -> int:
    """Batches in the partition's log, read from the segment files' batch headers."""
    from odradek.storage.scan import iter_headers

    count = 0
    for path in sorted((data_dir / f"{topic}-0").glob("*.log")):
        fd = os.open(path, os.O_RDONLY)
        try:
            count += sum(1 for _ in iter_headers(fd, 0, os.fstat(fd).st_size))
        finally:
            os.close(fd)
    return count


# -- the runs --------------------------------------------------------------------------------------------


def _fill(bootstrap: str, topic: str, records: int, value_bytes: int) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    value = b"v" * value_bytes
    t0 = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=value)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError("the producer could not deliver every record")
    return time.perf_counter() - t0


def run_classic(server: Server, topic: str, records: int) -> dict:
    ctx = mp.get_context("spawn")
    ready, go, results = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_classic_member, args=(server.bootstrap, f"classic-{uuid.uuid4().hex[:8]}", topic,
                                                     records, ready, go, results))
    proc.start()
    try:
        if not ready.acquire(timeout=120):
            raise RuntimeError("the classic consumer was not assigned the partition")
        cpu0 = server.cpu()
        go.set()
        got, t_go, last, client_cpu = results.get(timeout=DEADLINE_S + 60)
        proc.join(60)
        cpu = server.cpu() - cpu0
    finally:
        go.set()
        if proc.is_alive():
            proc.kill()
    seconds = max(last - t_go, 1e-9)
    return {"kind": "classic", "members": 1, "records": got, "records_per_s": round(got / seconds),
            "seconds_from_start": round(seconds, 3), "member_min": got, "member_max": got,
            "broker_cpu_s": round(cpu, 3), "broker_us_per_record": round(cpu / max(got, 1) * 1e6, 2),
            "client_cpu_s": round(client_cpu, 3), "client_us_per_record": round(client_cpu / max(got, 1) * 1e6, 2),
            "exactly_once": None}


def run_share(server: Server, metrics_url: str, topic: str, records: int, members: int) -> dict:
    group = f"share-{members}-{uuid.uuid4().hex[:8]}"
    _cli(server.bootstrap, "config", "set", "group", group, "share.auto.offset.reset=earliest")
    ctx = mp.get_context("spawn")
    ready, go, stop, results = ctx.Semaphore(0), ctx.Event(), ctx.Event(), ctx.Queue()
    progress = [ctx.Value("q", 0, lock=False) for _ in range(members)]
    procs = [ctx.Process(target=_share_member, args=(server.bootstrap, group, topic, f"m{k}", ready, go, stop,
                                                     progress[k], results)) for k in range(members)]
    for p in procs:
        p.start()
    try:
        for _ in procs:
            if not ready.acquire(timeout=120):
                raise RuntimeError("a share consumer did not start")
        deadline = time.monotonic() + 120
        while _assigned_members(server.bootstrap, group) < members:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the share group did not list {members} assigned members")
            time.sleep(0.5)
        time.sleep(1.5)  # one heartbeat interval (1 s here): every member has heard its assignment
        accepts0, cpu0 = _accepts(metrics_url), server.cpu()
        t_go = time.time()
        go.set()
        deadline = time.monotonic() + DEADLINE_S
        while sum(v.value for v in progress) < records and time.monotonic() < deadline:
            time.sleep(0.05)
        t_all = time.time()
        stop.set()
        got = [results.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(60)
        # The members' closes accepted their last records: wait until the broker has counted them all.
        deadline = time.monotonic() + 30
        while _accepts(metrics_url) - accepts0 < records and time.monotonic() < deadline:
            time.sleep(0.1)
        accepts, cpu = _accepts(metrics_url) - accepts0, server.cpu() - cpu0
    finally:
        stop.set()
        go.set()
        for p in procs:
            if p.is_alive():
                p.kill()
    seen = bytearray(records)
    duplicates = redelivered = outside = 0
    per_member = []
    firsts, lasts = [], []
    client_cpu = 0.0
    for _client, raw, again, first, last, member_cpu in got:
        client_cpu += member_cpu
        offsets = array("q")
        offsets.frombytes(raw)
        per_member.append(len(offsets))
        redelivered += again
        if first:
            firsts.append(first)
            lasts.append(last)
        for o in offsets:
            if not 0 <= o < records:
                outside += 1
            elif seen[o]:
                duplicates += 1
            else:
                seen[o] = 1
    missing = records - sum(seen)
    received = sum(per_member)
    exactly_once = duplicates == 0 and missing == 0 and outside == 0 and redelivered == 0 and accepts == records
    return {"kind": "share", "members": members, "records": received,
            "records_per_s": round(received / max(t_all - t_go, 1e-9)),
            "records_per_s_first_to_last": round(received / max(max(lasts) - min(firsts), 1e-9)) if firsts else 0,
            "seconds_from_start": round(t_all - t_go, 3), "member_min": min(per_member), "member_max": max(per_member),
            "members_with_none": sum(1 for n in per_member if n == 0), "per_member": sorted(per_member),
            "broker_cpu_s": round(cpu, 3), "broker_us_per_record": round(cpu / max(accepts, 1) * 1e6, 2),
            "client_cpu_s": round(client_cpu, 3), "client_us_per_record": round(client_cpu / max(received, 1) * 1e6, 2),
            "accepted": int(accepts), "duplicates": duplicates, "missing": missing, "redelivered": redelivered,
            "exactly_once": exactly_once}


def run(*, records: int = 200_000, value_bytes: int = 100, members: tuple[int, ...] = DEFAULT_MEMBERS,
        runs: int = 1, workdir: str | Path | None = None) -> dict:
    import confluent_kafka

    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        metrics_port = free_port()
        server = Server("odradek", Path(tmp) / "share", extra=[
            "group.initial.rebalance.delay.ms=0",
            # Share members hear their assignment on their next heartbeat: 1 s, not Kafka's 5 s, so the runs
            # start sooner (the minimum is lowered to allow it).
            "group.share.min.heartbeat.interval.ms=1000", "group.share.heartbeat.interval.ms=1000",
            f"metrics.port={metrics_port}", "metrics.host=127.0.0.1",
        ]).start()
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        try:
            topic = f"share-bench-{uuid.uuid4().hex[:8]}"
            _cli(server.bootstrap, "topic", "create", topic, "--partitions", "1")
            fill_s = _fill(server.bootstrap, topic, records, value_bytes)
            batches = _log_batches(Path(tmp) / "share" / "odradek-data", topic)
            rows = []
            for k in range(runs):  # each run: the classic group, then each share group, all new groups
                rows.append(dict(run_classic(server, topic, records), run=k))
                for n in members:
                    rows.append(dict(run_share(server, metrics_url, topic, records, n), run=k))
        finally:
            server.stop()
    return {"client": f"confluent-kafka {confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})",
            "records": records, "value_bytes": value_bytes, "log_batches": batches,
            "records_per_batch": round(records / max(batches, 1)), "fill_seconds": round(fill_s, 2),
            "runs": runs, "loadavg": os.getloadavg(), "rows": rows}


def _spread(values: list[float], fmt: str = ",.0f") -> str:
    """The median, and (min-max) when there is more than one value."""
    ordered = sorted(values)
    text = format(statistics.median(ordered), fmt)
    return text if len(ordered) == 1 else f"{text} ({format(ordered[0], fmt)}–{format(ordered[-1], fmt)})"


def render(results: dict) -> str:
    runs = results.get("runs", 1)
    lines = [f"{results['client']}; one partition, {results['records']:,} records of {results['value_bytes']} B "
             f"in {results['log_batches']:,} log batches ({results['records_per_batch']:,} records per batch); "
             f"{runs} run(s): median (min–max); load average {' '.join(f'{x:.1f}' for x in results['loadavg'])}",
             "",
             "| group | consumers | records/s | first→last records/s | records per member, min / max "
             "| broker µs CPU / record | clients µs CPU / record | accepted exactly once |",
             "|---|---|---|---|---|---|---|---|"]
    cells: dict[tuple[str, int], list[dict]] = {}
    for r in results["rows"]:
        cells.setdefault((r["kind"], r["members"]), []).append(r)
    for (kind, members), rows in cells.items():
        rate = _spread([r["records_per_s"] for r in rows])
        broker = _spread([r["broker_us_per_record"] for r in rows], ".2f")
        client = _spread([r["client_us_per_record"] for r in rows], ".2f")
        spread = f"{min(r['member_min'] for r in rows):,} / {max(r['member_max'] for r in rows):,}"
        if kind == "classic":
            lines.append(f"| classic | 1 | {rate} | – | {spread} | {broker} | {client} | n/a (offset commits) |")
            continue
        first_last = _spread([r["records_per_s_first_to_last"] for r in rows])
        bad = [r for r in rows if not r["exactly_once"]]
        once = "yes" if not bad else "NO: " + "; ".join(
            f"{r['accepted']:,} accepted, {r['duplicates']} duplicated, {r['missing']} missing, "
            f"{r['redelivered']} redelivered" for r in bad)
        lines.append(f"| share | {members} | {rate} | {first_last} | {spread} | {broker} | {client} | {once} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.share_bench",
        description="Share groups of 1/4/16 consumers beside a classic group, on one partition.")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--members", default=",".join(str(n) for n in DEFAULT_MEMBERS),
                        help="comma-separated share-group sizes (default 1,4,16)")
    parser.add_argument("--runs", type=int, default=1, help="rounds of every group on the same broker (default 1)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    members = tuple(int(x) for x in args.members.split(",") if x.strip())
    if args.records < 1 or args.runs < 1 or not members or min(members) < 1:
        parser.error("--records, --runs and every --members entry must be at least 1")
    results = run(records=args.records, value_bytes=args.value_bytes, members=members, runs=args.runs)
    print(json.dumps(results, indent=2) if args.json else render(results))
    return 0 if all(r["exactly_once"] in (None, True) for r in results["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
