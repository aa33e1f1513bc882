"""Results out: latest.json (everything, raw runs included), latest.md (tables), latest.png (chart)."""

from __future__ import annotations

import json
from pathlib import Path

CLIENT_BOUND = 0.9  # client CPU (cores) at or above which a figure is marked client-bound
NOISY = 0.5  # other busy cores at or above which a figure is marked noisy
LABEL = {"odradek": "Odradek", "null": "null sink (ceiling)", "tansu": "Tansu (peer)", "floor": "floor (canned answer)",
         "kafka": "Apache Kafka (reference)"}


def _med(d):
    return d.get("median") if isinstance(d, dict) else None


def _n(v, digits: int = 0) -> str:
    if v is None:
        return "–"
    if digits == 0:
        return f"{v:,.0f}"
    return f"{v:,.{digits}f}"


def _spread(d, digits: int = 0) -> str:
    if not isinstance(d, dict):
        return "–"
    if d.get("n", 1) <= 1 or d["min"] == d["max"]:
        return _n(d["median"], digits)
    return f"{_n(d['median'], digits)} ({_n(d['min'], digits)}–{_n(d['max'], digits)})"


def _x(v) -> str:
    return "–" if v is None else f"{v:.2f}×"


def _ms(d) -> str:
    if not isinstance(d, dict):
        return "–"
    m = d["median"]
    digits = 2 if m < 10 else 1 if m < 100 else 0
    return _spread(d, digits)


def markdown(results: dict) -> str:
    meta = results.get("meta", {})
    lines = [f"# Odradek benchmark — {meta.get('started', '')}", ""]
    pl = meta.get("placement", {})
    lines += [
        f"- Machine: {meta.get('cpu_model')}, {meta.get('cores')} cores, {_n(meta.get('memory_mib'))} MiB; "
        f"Python {meta.get('python')}; Linux {meta.get('kernel')}",
        f"- Placement: servers on core(s) {pl.get('server_cpus')}, load generators on core(s) {pl.get('client_cpus')}",
        f"- Load generator: {meta.get('client')}, one process per load; Odradek at {meta.get('odradek_commit')}",
        f"- Peer: {meta.get('peer') or 'peer not available'}",
        f"- Reference: {meta.get('reference') or 'not run'}",
        f"- librdkafka features each target's ApiVersions table turns on: {_features(meta.get('client_features'))}",
        f"- {'Quick run' if meta.get('quick') else 'Full run'}: median of {meta.get('runs')} run(s), (min–max) when more than one; "
        f"wall time {_n(meta.get('wall_s'))} s; load average at start {_fmt_load(meta.get('loadavg_start'))}, "
        f"at end {_fmt_load(meta.get('loadavg_end'))}",
    ]
    for u in meta.get("updates", []):
        lines.append(f"- Re-run later with `--update`: {', '.join(u['workloads'])} at {u.get('started')} "
                     f"({u.get('runs')} run(s), load average at start {_fmt_load(u.get('loadavg_start'))})")
    lines.append("")
    cells = results.get("cells", [])
    if cells:
        lines += [
            "## Throughput",
            "",
            "records/s and MB/s of 100-byte (or 16 KiB) values acknowledged or consumed; core-s/M: CPU seconds "
            "per million records; CPU (cores): average cores busy over the window; other load: busy cores on "
            "the machine that were neither server nor client (noise).",
            "",
            "| Workload | Target | records/s | MB/s | records/request | server core-s/M | server CPU (cores) | client core-s/M "
            "| client CPU (cores) | server RSS MiB | other load (cores) | vs ceiling | vs peer | vs Kafka |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for c in cells:
            for kind, t in c["targets"].items():
                label = LABEL.get(kind, kind)
                if "na" in t:
                    lines.append(f"| {c['name']} | {label} | {t['na']} | | | | | | | | | | | |")
                    continue
                s = t["summary"]
                vs_c = _x(c["ratios"].get("vs_ceiling")) if kind == "odradek" else ""
                vs_p = _x(c["ratios"].get("vs_peer")) if kind == "odradek" else ""
                vs_k = _x(c["ratios"].get("vs_kafka")) if kind == "odradek" else ""
                err = f" ⚠ {s['errors']:,} errors" if s.get("errors") else ""
                marks = ""
                if (_med(s.get("client_cpu_util")) or 0) >= CLIENT_BOUND:
                    marks += " ᶜ"
                if (_med(s.get("other_load_cores")) or 0) >= NOISY:
                    marks += " ⁿ"
                lines.append(
                    f"| {c['name']} | {label} | {_spread(s.get('records_per_s'))}{marks}{err} | {_n(_med(s.get('mb_per_s')), 1)} "
                    f"| {_n(_med(s.get('records_per_request')))} "
                    f"| {_spread(s.get('server_core_s_per_m'), 2)} | {_n(_med(s.get('server_cpu_util')), 2)} "
                    f"| {_n(_med(s.get('client_core_s_per_m')), 2)} | {_n(_med(s.get('client_cpu_util')), 2)} "
                    f"| {_n(_med(s.get('server_rss_mib')))} | {_n(_med(s.get('other_load_cores')), 2)} | {vs_c} | {vs_p} | {vs_k} |"
                )
        lines += [
            "",
            f"ᶜ client-bound: the load generator used ≥ {CLIENT_BOUND:.0%} of its core, so the server could have taken "
            f"more. ⁿ noisy: other work on the machine kept ≥ {NOISY} cores busy during the window. records/request: "
            "records per Produce (or Fetch) request, from librdkafka's statistics; a server that answers faster gets "
            "smaller batches, which costs it (and the client) more CPU per record.",
            "",
            "vs ceiling / vs peer / vs Kafka: Odradek's median records/s divided by the null sink's / Tansu's / "
            "Apache Kafka's. Server CPU per record, Odradek over the others:",
            "",
            "| Workload | Odradek core-s/M ÷ null sink | Odradek core-s/M ÷ Tansu | Odradek core-s/M ÷ Kafka |",
            "|---|---:|---:|---:|",
        ]
        for c in cells:
            lines.append(f"| {c['name']} | {_x(c['ratios'].get('cpu_vs_ceiling'))} | {_x(c['ratios'].get('cpu_vs_peer'))} "
                         f"| {_x(c['ratios'].get('cpu_vs_kafka'))} |")
        lines.append("")
    lat = results.get("latency", [])
    if lat:
        lines += [
            "## Latency at a fixed rate (1 partition, acks=all, linger.ms=0)",
            "",
            "ack: produce -> delivery callback. e2e: produce -> a consumer in a second process (assign(), "
            "fetch.wait.max.ms default) receives it. Milliseconds, median over runs of each run's percentile. "
            "The floor answers each Produce with the bytes of its first answer and decodes nothing: what the client, "
            "the loopback and waking the server's idle core cost before a server does any work.",
            "",
            "| Rate | Target | ack p50 | ack p99 | ack p99.9 | e2e p50 | e2e p99 | e2e p99.9 | e2e received | server CPU (cores) | server RSS MiB |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for e in lat:
            for kind, t in e["targets"].items():
                label = LABEL.get(kind, kind)
                if "na" in t:
                    lines.append(f"| {e['rate']:,}/s | {label} | {t['na']} | | | | | | | | |")
                    continue
                if t.get("e2e"):
                    e2e = [_ms(t["e2e"][q]) for q in ("p50_ms", "p99_ms", "p999_ms")]
                    recv = f"{t['e2e_n']:,}/{t['e2e_expected']:,}"
                else:
                    e2e, recv = ["n/a", "n/a", "n/a"], "n/a (no Fetch)"
                lines.append(
                    f"| {e['rate']:,}/s | {label} | {_ms(t['ack']['p50_ms'])} | {_ms(t['ack']['p99_ms'])} | {_ms(t['ack']['p999_ms'])} "
                    f"| {' | '.join(e2e)} | {recv} | {_n(_med(t.get('server_cpu_util')), 3)} | {_n(_med(t.get('server_rss_mib')))} |"
                )
        small = [e for e in lat if e["records_per_run"] < 1000]
        if small:
            lines += ["", f"At {', '.join(str(e['rate']) + ' msg/s' for e in small)} a run has fewer than 1,000 records: "
                      "p99.9 there is close to the run's maximum."]
        lines.append("")
    parts = results.get("partitions")
    if parts:
        lines += [
            f"## {parts['partitions_requested']:,} partitions on one broker ({parts['topics']} topics × {parts['per_topic']})",
            "",
            "| Target | How created | Partitions | Create time s | RSS after create MiB | All-topics Metadata s "
            "| Restart (to listening) s | RSS after restart MiB | Empty start s / RSS MiB |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for kind, r in parts["targets"].items():
            label = LABEL.get(kind, kind)
            if "na" in r:
                lines.append(f"| {label} | {r['na']} | | | | | | | |")
                continue
            if r.get("error"):
                why = r.get("server_error") or r["error"]
                lines.append(
                    f"| {label} | {r.get('method', '–')}: **failed after {r.get('failed_after_partitions', 0):,} partitions** "
                    f"({'server died' if r.get('server_alive') is False else 'request failed'}: `{why[-160:]}`; open files "
                    f"{_n(r.get('open_files'))} of a limit of {_n(r.get('open_files_limit'))}) | {_n(r.get('partitions_created'))} "
                    f"| {_n(r.get('create_s'), 1)} | {_n(r.get('rss_after_create_mib'))} | – | not measured | – "
                    f"| {_n(r.get('empty_start_s'), 2)} / {_n(r.get('empty_rss_mib'))} |"
                )
                continue
            restart = _n(r.get("restart_s"), 2) if r.get("restart_s") is not None else r.get("restart_na", "–")
            lines.append(
                f"| {label} | {r.get('method', '–')}{' — ' + r['bounded'] if r.get('bounded') else ''} | {_n(r.get('partitions_listed') or r.get('partitions_created'))} "
                f"| {_n(r.get('create_s'), 1)} | {_n(r.get('rss_after_create_mib'))} | {_n(r.get('metadata_all_s'), 2)} "
                f"| {restart} | {_n(r.get('rss_after_restart_mib'))} | {_n(r.get('empty_start_s'), 2)} / {_n(r.get('empty_rss_mib'))} |"
            )
        lines.append("")
    md = results.get("metadata")
    if md:
        lines += [
            f"## Metadata propagation: 3 nodes, {md['topics']} topics of {md['partitions']} partition(s), RF=3, one at a time",
            "",
            "From the CreateTopics answer (sent after the records are committed, as Kafka does) to each node's Metadata "
            "naming a leader for every partition (`bench/metadata_propagation.py`; target p50 <= 20 ms, p99 <= 100 ms).",
            "",
            "| | p50 ms | p99 ms | max ms |",
            "|---|---:|---:|---:|",
            f"| every node serves the topic | {_n(md['all_nodes_p50_ms'], 1)} | {_n(md['all_nodes_p99_ms'], 1)} "
            f"| {_n(md['all_nodes_max_ms'], 1)} |",
            f"| each node other than the active controller | {_n(md['follower_node_p50_ms'], 1)} "
            f"| {_n(md['follower_node_p99_ms'], 1)} | |",
            f"| an acks=all Produce acknowledged on every partition | {_n(md['produce_p50_ms'], 1)} "
            f"| {_n(md['produce_p99_ms'], 1)} | |",
            f"| CreateTopics itself (send -> answer) | {_n(md['create_p50_ms'], 1)} | | |",
            "",
        ]
    lines += replication_lines(results.get("replication"))
    lines += partition_curve_lines(results.get("partition_curve"))
    micro = results.get("micro", {})
    if micro:
        lines += ["## Codec and storage micro-benchmarks", ""]
        for name, m in micro.items():
            lines.append(f"### {name}")
            lines.append("")
            if "na" in m:
                lines += [f"not measured: {m['na']}", ""]
                continue
            lines += _render_any(m["result"]) + [""]
    fails = results.get("failures", [])
    if fails:
        lines += ["## Failures", ""]
        for f in fails:
            lines.append(f"- {f['where']}: `{f['error'].strip().splitlines()[-1][:300] if f['error'].strip() else ''}`")
        lines.append("")
    return "\n".join(lines)


def _median(values) -> float | None:
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def replication_lines(rep: dict | None) -> list[str]:
    """The `replication` section (bench/replication_bench.py's results per target): RF=1 and RF=3 side by
    side, medians of the runs."""
    if not rep:
        return []
    lines = ["## Replication: RF=1 vs RF=3 on 3 nodes (1 partition, acks=all, idempotent, 100 B records)", "",
             "Leader and follower CPU per million records are each node's own (idle cost taken out); the follower "
             "figure is the busier of the two. Ack latency: acks=all, linger.ms 0, at a steady rate "
             "(`bench/replication_bench.py`).", "",
             "| Target | RF | records/s | leader core-s/M | follower core-s/M | ack p50 / p99 ms at 50 msg/s "
             "| ack p50 / p99 ms at 5,000 msg/s |",
             "|---|---|---:|---:|---:|---:|---:|"]
    notes = []
    for kind, r in rep.get("targets", {}).items():
        label = LABEL.get(kind, kind)
        if "na" in r:
            lines.append(f"| {label} | {r['na']} | | | | | |")
            continue
        tp, lat, by_rate = r.get("throughput", {}), r.get("latency", {}), r.get("latency_by_rate", {})
        for topic in ("rf1", "rf3"):
            rows = tp.get(topic, [])
            follower = _median(max(x["follower_core_s_per_M"]) for x in rows if x.get("follower_core_s_per_M")) \
                if topic == "rf3" else None

            def p(cells: list, key: str) -> str:
                return _n(_median(c.get(key) for c in cells), 2)

            fast = by_rate.get("5000", {}).get(topic, [])
            lines.append(
                f"| {label} | {topic[2:]} | {_n(_median(x.get('records_s') for x in rows))} "
                f"| {_n(_median(x.get('leader_core_s_per_M') for x in rows), 2)} | {_n(follower, 2)} "
                f"| {p(lat.get(topic, []), 'p50_ms')} / {p(lat.get(topic, []), 'p99_ms')} "
                f"| {p(fast, 'p50_ms')} / {p(fast, 'p99_ms')} |")
        rf1 = _median(x.get("records_s") for x in tp.get("rf1", []))
        rf3 = _median(x.get("records_s") for x in tp.get("rf3", []))
        if rf1 and rf3:
            notes.append(f"{label}: RF=3 / RF=1 records/s {rf3 / rf1:.2f}")
        fo = r.get("failover") or {}
        if fo.get("partition_leader"):
            notes.append(
                f"{label} failover (kill -9, broker.session.timeout.ms={r.get('broker_session_timeout_ms')}): partition "
                "leader -> new leader in metadata " + ", ".join(_n(x["new_leader_s"], 2) for x in fo["partition_leader"])
                + " s, producer acknowledged again " + ", ".join(_n(x["client_resumed_s"], 2) for x in fo["partition_leader"])
                + " s; active controller -> new controller "
                + ", ".join(_n(x["new_controller_s"], 2) for x in fo.get("active_controller", [])) + " s")
        if r.get("loadavg"):
            notes.append(f"{label}: load average after its cells {_fmt_load(r['loadavg'])}")
    lines.append("")
    lines += [f"- {n}" for n in notes]
    return lines + ([""] if notes else [])


def partition_curve_lines(curve: dict | None) -> list[str]:
    """The `partition-curve` section (bench/partition_scale.py's results): one row per partition count."""
    if not curve:
        return []
    lines = ["## Partition-count curve: one RF=3 topic of N partitions on 3 nodes", "",
             "Created: CreateTopics answered (committed). In sync: every node's Metadata shows all N led with a full "
             "ISR and its DescribeLogDirs lists N logs. Election: kill -9 of the node leading the most partitions "
             "(not the quorum leader) -> every partition led by a live node. Longest stall: the slowest of a probe's "
             "ApiVersions, one in flight per node, while the topic is created and comes into sync "
             "(`bench/partition_scale.py`). Flat per partition is the goal.", "",
             "| N | created s | in sync s | ms / partition | kill -> all led s | it led | RSS KiB / partition "
             "(nodes 1,2,3) | longest stall ms (nodes 1,2,3) | quorum leader lost | load average |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in curve.get("sizes", []):
        n = r["partitions"]
        stalls = ", ".join(_n(v) for _, v in sorted((int(k), v) for k, v in (r.get("loop_stall_ms") or {}).items())) or "–"
        lost = sum((r.get("quorum_leader_lost") or {}).values())
        load = _fmt_load(r.get("loadavg"))
        if "error" in r or "all_in_sync_s" not in r:
            lines.append(f"| {n:,} | {_n(r.get('create_answered_s'), 2)} | not in sync: {r.get('error', '?')[:160]} "
                         f"| | | | | {stalls} | {lost} | {load} |")
            continue
        rss = ", ".join(_n(v, 1) for _, v in sorted((int(k), v) for k, v in r["rss_kib_per_partition"].items()))
        lines.append(f"| {n:,} | {_n(r['create_answered_s'], 2)} | {_n(r['all_in_sync_s'], 2)} "
                     f"| {_n(r['all_in_sync_s'] / n * 1000, 2)} | {_n(r.get('election_s'), 2)} "
                     f"| {_n(r.get('killed_node_led'))} | {rss} | {stalls} | {lost} | {load} |")
    lines.append("")
    if curve.get("peer"):
        lines += [f"- {curve['peer']}", ""]
    return lines


def _features(f) -> str:
    if not f:
        return "–"
    parts = []
    for kind, feats in f.items():
        if "error" in feats:
            parts.append(f"{LABEL.get(kind, kind)}: unknown ({feats['error'][:80]})")
            continue
        off = [name for name, on in feats.items() if not on]
        parts.append(f"{LABEL.get(kind, kind)}: " + ("all" if not off else "all but " + ", ".join(off) + " ⚠"))
    return "; ".join(parts)


def _fmt_load(v) -> str:
    return "–" if not v else " / ".join(f"{x:.2f}" for x in v)


def _render_any(obj) -> list[str]:
    """A table for a list of flat dicts or a dict of scalars / flat dicts, else a JSON block."""
    if isinstance(obj, dict) and isinstance(obj.get("markdown"), str):
        return [obj["markdown"]]
    rows = None
    if isinstance(obj, list) and obj and all(isinstance(r, dict) for r in obj):
        rows = obj
    elif isinstance(obj, dict) and obj and all(isinstance(v, dict) for v in obj.values()):
        rows = [{"name": k, **v} for k, v in obj.items()]
    elif isinstance(obj, dict) and obj and all(not isinstance(v, (dict, list)) for v in obj.values()):
        return ["| name | value |", "|---|---:|"] + [f"| {k} | {_cell(v)} |" for k, v in obj.items()]
    if rows and all(not isinstance(v, (dict, list)) for r in rows for v in r.values()):
        cols: list[str] = []
        for r in rows:
            cols += [k for k in r if k not in cols]
        out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for r in rows:
            out.append("| " + " | ".join(_cell(r.get(c)) for c in cols) + " |")
        return out
    return ["```json", json.dumps(obj, indent=1, default=str)[:8000], "```"]


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return "–" if v is None else str(v)


def draw_chart(results: dict, path: Path) -> str | None:
    """A PNG: records/s per throughput cell and target; p99 latencies. None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (`pip install -e '.[bench]'`): chart skipped"
    cells = results.get("cells", [])
    lat = results.get("latency", [])
    if not cells and not lat:
        return "nothing to chart"
    kinds = [k for k in ("odradek", "null", "tansu", "kafka", "floor") if any(k in c["targets"] for c in cells) or any(k in e["targets"] for e in lat)]
    colors = {"odradek": "#d95f02", "null": "#7570b3", "tansu": "#1b9e77", "kafka": "#e7298a", "floor": "#999999"}
    import textwrap

    nplots = (2 if cells else 0) + (1 if lat else 0)
    fig, axes = plt.subplots(nplots, 1, figsize=(13, 5 * nplots), squeeze=False)
    ax_i = 0
    width = 0.8 / max(1, len(kinds))
    panels = (("records_per_s", "records/s (log scale; median, min–max)", "Throughput (sensitive to other load on the machine)"),
              ("server_core_s_per_m", "server core-seconds per million records (log)", "Server CPU per record (lower is better)"))
    for key, ylabel, title in panels if cells else ():
        ax = axes[ax_i][0]
        ax_i += 1
        for j, kind in enumerate(kinds):
            xs, ys, lo, hi = [], [], [], []
            for i, c in enumerate(cells):
                s = c["targets"].get(kind, {}).get("summary", {}).get(key)
                if not s:
                    continue
                xs.append(i + (j - (len(kinds) - 1) / 2) * width)
                ys.append(s["median"])
                lo.append(s["median"] - s["min"])
                hi.append(s["max"] - s["median"])
            if xs:
                ax.bar(xs, ys, width, yerr=[lo, hi], label=LABEL.get(kind, kind), color=colors.get(kind), capsize=2)
        ax.set_xticks(range(len(cells)))
        ax.set_xticklabels([textwrap.fill(c["name"], 18) for c in cells], fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3, which="both")
    if lat:
        ax = axes[ax_i][0]
        labels, groups = [], []
        for e in lat:
            for metric, key in (("ack", "ack"), ("e2e", "e2e")):
                labels.append(f"{e['rate']:,} msg/s\n{metric} p99")
                groups.append((e, key))
        for j, kind in enumerate(kinds):
            xs, ys = [], []
            for i, (e, key) in enumerate(groups):
                t = e["targets"].get(kind, {})
                d = (t.get(key) or {}).get("p99_ms") if isinstance(t.get(key), dict) else None
                if d:
                    xs.append(i + (j - (len(kinds) - 1) / 2) * width)
                    ys.append(d["median"])
            if xs:
                ax.bar(xs, ys, width, label=LABEL.get(kind, kind), color=colors.get(kind))
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("p99 latency, ms (log scale)")
        ax.set_title("Latency at a fixed rate")
        ax.legend()
        ax.grid(axis="y", alpha=0.3, which="both")
    meta = results.get("meta", {})
    fig.suptitle(f"Odradek benchmark {meta.get('started', '')} — {meta.get('cpu_model')}, {meta.get('cores')} cores", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return None


def write_all(results: dict, out: Path, *, chart: bool = True) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    note = None
    if chart:
        png = out / "latest.png"
        note = draw_chart(results, png)
        if note is None:
            paths.append(png)
    else:
        note = "chart skipped (--no-chart)"
    from .procs import scrub

    md = markdown(results)
    if note:
        md += f"\n_Chart: {note}._\n"
        results.setdefault("meta", {})["chart"] = note
    (out / "latest.md").write_text(scrub(md))
    (out / "latest.json").write_text(scrub(json.dumps(results, indent=1, default=str)))
    paths[:0] = [out / "latest.md", out / "latest.json"]
    return paths
