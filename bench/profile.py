"""Profile the broker under load with py-spy: `python -m bench.profile` (see bench/PROFILE.md).

    python -m bench.profile --workload produce --duration 10
    python -m bench.profile --workload consume --duration 10

Starts Odradek pinned to the server core, drives it with the same load generator as the harness
(produce: 100 B records, 1 partition, acks=1, no compression; consume: a preloaded partition read from
offset 0 over and over), and attaches `py-spy record` to the broker for `--duration` seconds. Writes, per
workload, into --out (default bench/results/profile):

  <workload>.collapsed   the raw samples (collapsed stacks: flamegraph.pl and speedscope read them)
  <workload>.svg         a flame graph (a second py-spy window of the same length), unless --no-svg
  <workload>.md          the top functions by self and inclusive share, and shares by layer

The shares are of py-spy's samples of the broker's threads while they were running (idle time is not
sampled), i.e. shares of the broker's CPU; the broker's CPU use over the window (from /proc) is printed
beside them so that shares can be turned into core-seconds.
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
from .procs import Placement, Server, pinned

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
    ("replication: replica manager, partition, purgatory", ("replication/",)),
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
    lines = [
        f"# py-spy profile of the broker: {workload}",
        "",
        f"- load: {json.dumps({k: v for k, v in spec.items() if k not in ('bootstrap', 'topic')})}",
        f"- broker CPU over the sampled window: {cpu['cpu_s']:.2f} core-s in {cpu['wall_s']:.2f} s "
        f"({cpu['cpu_s'] / cpu['wall_s']:.2f} cores); {a['samples']:,} samples",
        f"- records acknowledged/consumed over the whole load: {cpu.get('records', 0):,} in {cpu.get('load_s', 0):.1f} s",
        "",
        "## Self time by layer (% of broker CPU samples)",
        "",
        "| Layer | % |",
        "|---|---:|",
    ]
    lines += [f"| {name} | {p:.1f} |" for name, p in a["layers"]]
    lines += ["", "## Top functions by self time", "", "| % self | Function |", "|---:|---|"]
    lines += [f"| {p:.1f} | `{f}` |" for f, p in a["self"]]
    lines += ["", "## Top functions by inclusive time", "", "| % incl. | Function |", "|---:|---|"]
    lines += [f"| {p:.1f} | `{f}` |" for f, p in a["inclusive"]]
    return "\n".join(lines) + "\n"


def pyspy() -> str:
    exe = Path(sys.executable).with_name("py-spy")
    found = str(exe) if exe.exists() else shutil.which("py-spy")
    if not found:
        raise SystemExit("py-spy is not installed: pip install py-spy (or pip install -e '.[bench]')")
    return found


def record(pid: int, seconds: float, out: Path, fmt: str, cpus, native: bool) -> None:
    args = [pyspy(), "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "200", "-o", str(out), "--format", fmt]
    if native:
        args.append("--native")
    subprocess.run(args, check=True, capture_output=True, timeout=seconds + 60, preexec_fn=pinned(cpus))


def profile(workload: str, seconds: float, out: Path, svg: bool, native: bool) -> Path:
    placement = Placement.plan()
    workdir = Path(tempfile.mkdtemp(prefix="odradek-profile-"))
    server = Server("odradek", workdir, partitions=1, cpus=placement.server).start()
    gen = None
    try:
        topic = f"profile-{workload}"
        if kafka_admin.serves_create_topics(server.bootstrap):
            kafka_admin.create_topics(server.bootstrap, [topic], 1)
        base = {"bootstrap": server.bootstrap, "topic": topic, "partitions": 1}
        windows = 2 if svg else 1
        load_s = seconds * windows + 3
        if workload == "produce":
            spec = dict(base, mode="produce", acks="1", compression="none", value_size=100, duration_s=load_s, linger_ms=5)
        else:
            pre = Loadgen(dict(base, mode="produce", acks="1", compression="none", value_size=100, duration_s=30, max_records=1_000_000), placement.client)
            pre.wait_ready(60)
            pre.send("GO")
            n = pre.wait_result(180)["records"] + 10
            print(f"preloaded {n:,} records", flush=True)
            # Re-read the partition from offset 0 until the window is over (a large `expected`).
            spec = dict(base, mode="consume", expected=n * 1000, max_s=load_s, rewind_every=n)
        gen = Loadgen(spec, placement.client)
        gen.wait_ready(60)
        gen.send("GO")
        t_go = time.monotonic()
        time.sleep(2)
        cpu0, t0 = server.cpu(), time.monotonic()
        out.mkdir(parents=True, exist_ok=True)
        collapsed = out / f"{workload}.collapsed"
        record(server.pid, seconds, collapsed, "raw", placement.client, native)
        cpu = {"cpu_s": server.cpu() - cpu0, "wall_s": time.monotonic() - t0}
        if svg:
            record(server.pid, seconds, out / f"{workload}.svg", "flamegraph", placement.client, native)
        result = gen.wait_result(load_s + 120)
        cpu["records"] = result.get("records", 0)
        cpu["load_s"] = time.monotonic() - t_go
        analysis = analyze(parse_collapsed(collapsed.read_text()))
        md = out / f"{workload}.md"
        md.write_text(render(workload, analysis, cpu, {k: v for k, v in spec.items()}))
        return md
    finally:
        if gen is not None:
            gen.kill()
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile", description="py-spy profile of the broker under load")
    p.add_argument("--workload", choices=("produce", "consume", "both"), default="both")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per py-spy window")
    p.add_argument("--out", default=str(Path("bench") / "results" / "profile"))
    p.add_argument("--no-svg", action="store_true", help="skip the flame graph (one window instead of two)")
    p.add_argument("--native", action="store_true", help="include native (C) frames")
    args = p.parse_args(argv)
    for w in (("produce", "consume") if args.workload == "both" else (args.workload,)):
        md = profile(w, args.duration, Path(args.out), not args.no_svg, args.native)
        print(md.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
