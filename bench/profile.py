"""Profile the broker under load with py-spy: `python -m bench.profile` (see bench/PROFILE.md).

    python -m bench.profile                          # every workload, 10 s windows
    python -m bench.profile --workload produce --duration 10

Starts Odradek pinned to the server core, drives it with the harness's load generator, and attaches
`py-spy record --gil` to the broker for `--duration` seconds. Workloads:

  produce        100 B records, 1 partition, acks=1, batches up to 1 MiB (the harness's headline cell)
  produce-small  100 B records, 8 partitions, acks=all + idempotence, 16 KiB batches (Java-like batching)
  produce-lz4    100 B records, 1 partition, acks=all + idempotence, lz4, batches up to 1 MiB
  consume        a preloaded partition (1M records) read from offset 0 over and over

Writes, per workload, into --out (default bench/results/profile):

  <workload>.collapsed   the raw samples (collapsed stacks: flamegraph.pl and speedscope read them)
  <workload>.svg         a flame graph (a second py-spy window of the same length), unless --no-svg
  <workload>.md          shares by layer, top functions and lines by self time, top by inclusive time

Why --gil: without it py-spy counts threads blocked in C (the executor's idle worker, uvloop's epoll
wait) as active, which inflated the "active" samples to about 2.5x the CPU time /proc reported. With
--gil only the thread holding the GIL is sampled; on this broker those samples add up to about the
CPU time /proc reports, and the report prints both so that the two can be compared. Work done with the
GIL released (syscalls inside libuv, os.write / os.sendfile) is not in the shares.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import kafka_admin
from .driver import Loadgen
from .procs import Placement, Server, page_faults, pinned, scrub

_LINE = re.compile(r":\d+\)$")

# Layer of a frame, by the file it is in (first match wins).
LAYERS = [
    ("codec (generated encoders/decoders)", ("<codec", "<generated", "protocol/codec.py")),
    ("protocol: framing, headers, records", ("protocol/",)),
    ("network pipeline", ("broker/network.py",)),
    ("handlers", ("broker/handlers/",)),
    ("broker: dispatch, timers, server", ("broker/server.py", "broker/components.py")),
    ("metrics", ("broker/metrics.py", "prometheus_client/")),
    ("logging", ("structlog/", "broker/logging.py", "logging/")),
    ("replication: replica manager, partition, delayed operations", ("replication/",)),
    ("purgatory: timing wheel, delayed operations", ("purgatory/",)),
    ("metadata and raft", ("metadata/", "raft/")),
    ("storage: log, segments, indexes", ("storage/",)),
    ("asyncio / uvloop", ("asyncio/", "uvloop/")),
]


def layer_of(frame: str) -> str:
    for name, needles in LAYERS:
        if any(n in frame for n in needles):
            return name
    return "other"


def parse_collapsed(text: str) -> list[tuple[list[str], int]]:
    stacks = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        try:
            n = int(count)
        except ValueError:
            continue
        frames = [_LINE.sub(")", f) for f in stack.split(";")]
        stacks.append((frames, n))
    return stacks


def analyze(stacks: list[tuple[list[str], int]], top: int = 25) -> dict:
    total = sum(n for _, n in stacks) or 1
    self_c: collections.Counter = collections.Counter()
    incl_c: collections.Counter = collections.Counter()
    layer_self: collections.Counter = collections.Counter()
    for frames, n in stacks:
        # Skip the thread/process header frames py-spy may add (e.g. "process 123:..." / "thread (0x..)").
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        leaf = frames[-1]
        self_c[leaf] += n
        # The self time of a frame outside the project (a builtin, the event loop) is charged to the
        # innermost project frame's layer when there is one, so "asyncio" means the loop itself.
        layer = layer_of(leaf)
        if layer == "other":
            for f in reversed(frames):
                if layer_of(f) != "other":
                    layer = layer_of(f)
                    break
        layer_self[layer] += n
        for f in set(frames):
            incl_c[f] += n
    pct = lambda c: c * 100.0 / total  # noqa: E731
    return {
        "samples": total,
        "self": [(f, pct(c)) for f, c in self_c.most_common(top)],
        "inclusive": [(f, pct(c)) for f, c in incl_c.most_common(top * 2)],
        "layers": [(name, pct(c)) for name, c in layer_self.most_common()],
    }


def render(workload: str, a: dict, cpu: dict, spec: dict) -> str:
    held = a["samples"] / (RATE * cpu["wall_s"])  # fraction of wall time some thread held the GIL
    util = cpu["cpu_s"] / cpu["wall_s"]
    per_req = f"{cpu['records'] / cpu['requests']:,.0f}" if cpu.get("requests") else "?"
    lines = [
        f"# py-spy profile of the broker: {workload}",
        "",
        f"- load: {json.dumps({k: v for k, v in spec.items() if k not in ('bootstrap', 'topic')})}",
        f"- broker CPU over the sampled window (/proc): {cpu['cpu_s']:.2f} core-s in {cpu['wall_s']:.2f} s = {util:.2f} cores",
        f"- py-spy --gil samples: {a['samples']:,} at {RATE}/s = GIL held {held:.2f} of the wall time "
        f"(≈ {held / util if util else 0:.0%} of the broker's CPU time; the rest is outside the GIL: syscalls in "
        "libuv, page faults, C code that releases the GIL)",
        f"- page faults in the window: {cpu['minflt']:,} minor ({cpu['minflt'] / cpu['wall_s']:,.0f}/s), {cpu['majflt']:,} major",
        f"- records over the whole load: {cpu.get('records', 0):,} in {cpu.get('load_s', 0):.1f} s, {per_req} per request; "
        f"load generator CPU {cpu.get('client_cpu_s') or 0:.1f} core-s",
        "",
        "## Self time by layer (% of broker CPU samples)",
        "",
        "| Layer | % |",
        "|---|---:|",
    ]
    lines += [f"| {name} | {p:.1f} |" for name, p in a["layers"]]
    lines += ["", "## Top functions by self time", "", "| % self | Function |", "|---:|---|"]
    lines += [f"| {p:.1f} | `{f}` |" for f, p in a["self"]]
    lines += ["", "## Top lines by self time", "", "| % self | Line |", "|---:|---|"]
    lines += [f"| {p:.1f} | `{f}` |" for f, p in a.get("lines", [])]
    lines += ["", "## Top functions by inclusive time", "", "| % incl. | Function |", "|---:|---|"]
    lines += [f"| {p:.1f} | `{f}` |" for f, p in a["inclusive"]]
    return "\n".join(lines) + "\n"


def pyspy() -> str:
    exe = Path(sys.executable).with_name("py-spy")
    found = str(exe) if exe.exists() else shutil.which("py-spy")
    if not found:
        raise SystemExit("py-spy is not installed: pip install py-spy (or pip install -e '.[bench]')")
    return found


RATE = 200  # samples per second


def record(pid: int, seconds: float, out: Path, fmt: str, cpus, native: bool = False, gil: bool = True) -> str:
    """py-spy record; with `gil`, only the thread holding the GIL is sampled (see the module doc)."""
    args = [pyspy(), "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", str(RATE), "-o", str(out), "--format", fmt]
    if gil:
        args.append("--gil")
    if native:
        args.append("--native")
    p = subprocess.run(args, check=True, capture_output=True, text=True, timeout=seconds + 60, preexec_fn=pinned(cpus))
    return p.stdout + p.stderr


PRODUCE_LOADS = {
    # The harness's headline produce cell: 100 B records, batches up to 1 MiB, 1 partition, acks=1.
    "produce": {"partitions": 1, "acks": "1", "compression": "none", "value_size": 100, "linger_ms": 5},
    # Java-client-like batching (batch.size 16 KiB, linger.ms 5), 8 partitions, acks=all, idempotent:
    # many more requests per record, so per-request costs show.
    "produce-small": {"partitions": 8, "acks": "all", "idempotence": True, "compression": "none", "value_size": 100,
                      "linger_ms": 5, "batch_size": 16384},
    # The headline cell with lz4 and acks=all + idempotence: big compressed batches through producer state.
    "produce-lz4": {"partitions": 1, "acks": "all", "idempotence": True, "compression": "lz4", "value_size": 100,
                    "linger_ms": 5},
}
WORKLOADS = (*PRODUCE_LOADS, "consume")


def profile(workload: str, seconds: float, out: Path, svg: bool, native: bool) -> Path:
    placement = Placement.plan()
    workdir = Path(tempfile.mkdtemp(prefix="odradek-profile-"))
    load = PRODUCE_LOADS.get(workload, {"partitions": 1})
    server = Server("odradek", workdir, partitions=load["partitions"], cpus=placement.server).start()
    gen = None
    try:
        topic = f"profile-{workload}"
        if kafka_admin.serves_create_topics(server.bootstrap):
            kafka_admin.create_topics(server.bootstrap, [topic], load["partitions"])
        base = {"bootstrap": server.bootstrap, "topic": topic, "partitions": load["partitions"]}
        windows = 2 if svg else 1
        load_s = seconds * windows + 4
        if workload in PRODUCE_LOADS:
            spec = dict(base, mode="produce", duration_s=load_s, **load)
        else:
            pre = Loadgen(dict(base, mode="produce", acks="1", compression="none", value_size=100, duration_s=30, max_records=1_000_000), placement.client)
            pre.wait_ready(60)
            pre.send("GO")
            n = pre.wait_result(180)["records"] + 10
            print(f"preloaded {n:,} records", flush=True)
            # Re-read the partition from offset 0 until the window is over.
            spec = dict(base, mode="consume", expected=n * 1000, max_s=load_s, rewind_every=n)
        gen = Loadgen(spec, placement.client)
        gen.wait_ready(60)
        gen.send("GO")
        t_go = time.monotonic()
        time.sleep(2)
        cpu0, t0, flt0 = server.cpu(), time.monotonic(), page_faults(server.pid)
        out.mkdir(parents=True, exist_ok=True)
        collapsed = out / f"{workload}.collapsed"
        record(server.pid, seconds, collapsed, "raw", placement.client, native)
        flt1 = page_faults(server.pid)
        cpu = {"cpu_s": server.cpu() - cpu0, "wall_s": time.monotonic() - t0, "minflt": flt1[0] - flt0[0], "majflt": flt1[1] - flt0[1]}
        if svg:
            svg_path = out / f"{workload}.svg"
            record(server.pid, seconds, svg_path, "flamegraph", placement.client, native)
            svg_path.write_text(scrub(svg_path.read_text()))
        result = gen.wait_result(load_s + 120)
        cpu["records"] = result.get("records", 0)
        cpu["requests"] = result.get("requests")
        cpu["client_cpu_s"] = result.get("client_cpu_s")
        cpu["load_s"] = time.monotonic() - t_go
        text = scrub(collapsed.read_text())
        collapsed.write_text(text)
        analysis = analyze(parse_collapsed(text))
        analysis["lines"] = top_lines(text)
        md = out / f"{workload}.md"
        md.write_text(render(workload, analysis, cpu, spec))
        return md
    finally:
        if gen is not None:
            gen.kill()
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def top_lines(text: str, top: int = 25) -> list[tuple[str, float]]:
    """Self time by source line (the leaf frame with its line number)."""
    c: collections.Counter = collections.Counter()
    total = 0
    for line in text.splitlines():
        stack, _, count = line.strip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        total += int(count)
        c[stack.split(";")[-1]] += int(count)
    return [(f, n * 100.0 / (total or 1)) for f, n in c.most_common(top)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile", description="py-spy profile of the broker under load")
    p.add_argument("--workload", choices=(*WORKLOADS, "all"), default="all")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per py-spy window")
    p.add_argument("--out", default=str(Path("bench") / "results" / "profile"))
    p.add_argument("--no-svg", action="store_true", help="skip the flame graph (one window instead of two)")
    p.add_argument("--native", action="store_true", help="include native (C) frames")
    args = p.parse_args(argv)
    for w in (WORKLOADS if args.workload == "all" else (args.workload,)):
        md = profile(w, args.duration, Path(args.out), not args.no_svg, args.native)
        print(md.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
