"""Time series the console keeps: group lag, and throughput and latency from the brokers' /metrics.

Lag over time: every `interval_s` the sampler asks the lag of each group (OffsetFetch plus ListOffsets,
`Admin.group_lag`; at most MAX_GROUPS groups per round) and appends the total to a ring of HISTORY points
per group. A group page's chart reads the ring; when the console has no principal of its own (every user
signs in), the chart's own refresh records a point with the viewer's principal instead (`record`).

Broker metrics: Odradek serves Prometheus text on `metrics.port`, which the Kafka protocol does not
advertise; the sampler reads each broker's `metrics.port` and `metrics.host` through DescribeConfigs (an
Odradek broker lists them; a Kafka broker does not, and then only `--metrics-url` given by hand is scraped)
and scrapes every URL each round, in a worker thread (urllib: a GET with a timeout), parsed by
prometheus_client's own parser. From two consecutive scrapes it derives bytes in/out per second, requests
per second, and the p99 of Produce and Fetch latency over the interval from the histogram's bucket deltas.

The ISR timeline: an Odradek broker keeps the exact ISR/leader changes it read from the metadata log (the
last 1000, metadata/isr_history.py) and serves them as JSON next to its /metrics, at `/odradek/isr-events`.
Each round the sampler asks every broker it scrapes for the events past the last offset it has from that
broker, and merges them by (metadata offset, topic, partition): the same change from several brokers is one
event, timed by the earliest broker that applied it live (a broker replaying its log at start-up does not
know when the change happened). Every change is there, a shrink and expand between two rounds included.
Against brokers without the route (Apache Kafka, or no /metrics known) the sampler falls back to comparing
each partition's ISR in Metadata between rounds, which sees only what differs from one round to the next.

Per-topic throughput: an Odradek broker counts, per topic, the batch bytes and records producers appended
to the partitions it leads and the record bytes it answered to consumers (`odradek_topic_bytes_in`,
`odradek_topic_messages_in`, `odradek_topic_bytes_out`, Kafka's BrokerTopicMetrics as counters). Each
broker's two consecutive scrapes give its rates; a topic's rate is the sum over the brokers (each partition
is led by one broker, so nothing is counted twice). `topic_rates` holds the latest, `topic_series` a ring per
topic for the topic page's chart (at most MAX_TOPIC_SERIES topics, the busiest kept). A counter that went
back (its broker restarted) counts from 0 again, as Prometheus' rate() reads a reset.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from odradek.client.admin import Admin
from odradek.client.errors import OdradekError

HISTORY = 360  # points kept per series (30 minutes at the default 5 s)
ISR_EVENTS = 500  # ISR changes kept for the sampled timeline
ISR_LOG = 1000  # exact ISR changes kept from the brokers' rings (each broker keeps 1000)
ISR_EVENTS_PATH = "/odradek/isr-events"
MAX_GROUPS = 50
MAX_TOPIC_SERIES = 500  # topics whose throughput history is kept
TOPIC_COUNTERS = {"odradek_topic_bytes_in_total": "bytes_in", "odradek_topic_bytes_out_total": "bytes_out",
                  "odradek_topic_messages_in_total": "messages_in"}
SCRAPE_TIMEOUT_S = 3.0
LATENCY_APIS = ("Produce", "Fetch")

log = logging.getLogger("odradek.console")


@dataclass
class Scrape:
    at: float
    counters: dict[str, float] = field(default_factory=dict)  # bytes_in, bytes_out, requests
    buckets: dict[str, dict[float, float]] = field(default_factory=dict)  # api -> le -> cumulative count
    topics: dict[str, dict[str, float]] = field(default_factory=dict)  # topic -> bytes_in, bytes_out, messages_in


def parse_scrape(text: str, at: float) -> Scrape:
    scrape = Scrape(at)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if name == "odradek_bytes_in_total":
                scrape.counters["bytes_in"] = scrape.counters.get("bytes_in", 0.0) + sample.value
            elif name == "odradek_bytes_out_total":
                scrape.counters["bytes_out"] = scrape.counters.get("bytes_out", 0.0) + sample.value
            elif name == "odradek_requests_total":
                scrape.counters["requests"] = scrape.counters.get("requests", 0.0) + sample.value
            elif name in TOPIC_COUNTERS and "topic" in sample.labels:
                row = scrape.topics.setdefault(sample.labels["topic"], {})
                row[TOPIC_COUNTERS[name]] = sample.value
            elif name == "odradek_request_latency_seconds_bucket" and sample.labels.get("api") in LATENCY_APIS:
                le = float(sample.labels["le"])
                api = sample.labels["api"]
                scrape.buckets.setdefault(api, {})[le] = sample.value
    return scrape


def quantile_of_delta(before: dict[float, float], after: dict[float, float], q: float) -> float | None:
    """The q-quantile (seconds) of the observations between two cumulative histograms: the upper bound of
    the first bucket whose count reaches q of the total (Prometheus' histogram_quantile without interpolation)."""
    bounds = sorted(after)
    deltas = [(le, after[le] - before.get(le, 0.0)) for le in bounds]
    total = deltas[-1][1] if deltas else 0.0
    if total <= 0:
        return None
    for le, count in deltas:
        if count >= q * total:
            return le if le != float("inf") else bounds[-2] if len(bounds) > 1 else None
    return None


@dataclass(frozen=True)
class IsrChange:
    at: float
    partition: str
    before: tuple[int, ...]
    after: tuple[int, ...]
    leader: int

    @property
    def kind(self) -> str:
        return "shrink" if len(self.after) < len(self.before) else "expand" if len(self.after) > len(self.before) \
            else "change"


@dataclass
class LoggedIsrChange:
    """One ISR/leader change from the metadata log, as the brokers' /odradek/isr-events report it."""

    offset: int  # the metadata-log offset of the batch that carried it (the same on every broker)
    topic: str
    index: int
    kind: str  # shrink, expand, change, leader, elr
    before: tuple[int, ...]
    after: tuple[int, ...]
    leader_before: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    applied_ms: int | None  # the earliest a broker applied it live (None: only replays seen)
    seen_by: set[int] = field(default_factory=set)

    @property
    def partition(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def at(self) -> float | None:
        return None if self.applied_ms is None else self.applied_ms / 1000


def merge_isr_events(into: dict[tuple[int, str, int], LoggedIsrChange], answer: dict[str, Any]) -> int:
    """Merge one broker's /odradek/isr-events answer into `into`; the highest offset it named (-1: none)."""
    node = int(answer.get("node_id", -1))
    highest = -1
    for e in answer.get("events", ()):
        key = (int(e["offset"]), str(e["topic"]), int(e["partition"]))
        highest = max(highest, key[0])
        live = None if e.get("replayed") else int(e["applied_ms"])
        known = into.get(key)
        if known is None:
            known = into[key] = LoggedIsrChange(
                key[0], key[1], key[2], str(e["kind"]), tuple(e["isr_before"]), tuple(e["isr"]),
                int(e["leader_before"]), int(e["leader"]), int(e["leader_epoch"]), tuple(e["replicas"]), live)
        elif live is not None and (known.applied_ms is None or live < known.applied_ms):
            known.applied_ms = live
        known.seen_by.add(node)
    return highest


def isr_events_url(metrics_url: str, after: int) -> str:
    """A broker's /odradek/isr-events URL next to its /metrics URL, for the events past `after`."""
    base = metrics_url[: -len("/metrics")] if metrics_url.endswith("/metrics") else metrics_url.rstrip("/")
    return f"{base}{ISR_EVENTS_PATH}?after={after}"


class Sampler:
    """The console's periodic sampling (one task), and the series the charts read."""

    def __init__(self, admin: Admin | None, metrics_urls: list[str], interval_s: float):
        self.admin = admin
        self.interval_s = interval_s
        self.fixed_urls = list(metrics_urls)
        self.discovered_urls: list[str] = []
        self.lag: dict[str, deque[tuple[float, int]]] = {}
        self.topic_lag: dict[str, dict[str, int]] = {}  # group -> topic -> its lag there, as last sampled
        self._isr: dict[tuple[str, int], tuple[int, ...]] = {}
        self.isr_events: deque[IsrChange] = deque(maxlen=ISR_EVENTS)  # newest first
        self.logged_isr: dict[tuple[int, str, int], LoggedIsrChange] = {}  # the brokers' exact timeline
        self._isr_after: dict[str, int] = {}  # metrics URL -> the highest offset it reported
        self.isr_exact = False  # whether a broker served /odradek/isr-events in the last round
        self.metrics: deque[dict[str, float | None]] = deque(maxlen=HISTORY)
        # topic -> {"bytes_in", "bytes_out", "messages_in"} per second over the last interval, and its history
        # as (t, bytes_in, bytes_out, messages_in) points.
        self.topic_rates: dict[str, dict[str, float]] = {}
        self.topic_series: dict[str, deque[tuple[float, float, float, float]]] = {}
        self._last: dict[str, Scrape] = {}
        self._task: asyncio.Task | None = None
        self.last_error: str | None = None

    @property
    def urls(self) -> list[str]:
        return sorted(set(self.fixed_urls) | set(self.discovered_urls))

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="console-sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass

    def record(self, group_id: str, total_lag: int, at: float | None = None,
               per_topic: dict[str, int] | None = None) -> None:
        if per_topic is not None:
            self.topic_lag[group_id] = per_topic
        series = self.lag.setdefault(group_id, deque(maxlen=HISTORY))
        now = time.time() if at is None else at
        if series and now - series[-1][0] < self.interval_s / 2:
            return  # several viewers: one point per interval
        series.append((now, total_lag))

    async def _run(self) -> None:
        rounds = 0
        while True:
            try:
                if self.admin is not None:
                    await self.admin.start()  # a no-op once connected
                    if rounds % 12 == 0:
                        await self._discover()
                await self._poll_isr_events()
                if self.admin is not None:
                    if not self.isr_exact:
                        await self._sample_isr()  # (the fallback: brokers without the exact timeline)
                    await self._sample_lag()
                await self._scrape()
                self.last_error = None
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a round that failed is retried next interval; the page says why
                self.last_error = f"{type(e).__name__}: {e}"
            rounds += 1
            await asyncio.sleep(self.interval_s)

    async def _discover(self) -> None:
        """Each broker's /metrics from its `metrics.port` and `metrics.host` configs (Odradek lists them)."""
        assert self.admin is not None
        cluster = await self.admin.describe_cluster()
        found = []
        for broker in cluster.brokers:
            try:
                entries = await self.admin.describe_configs("broker", str(broker.node_id), ["metrics.port", "metrics.host"])
            except OdradekError:
                continue
            values = {e.name: e.value for e in entries}
            port = values.get("metrics.port")
            if port and port.isdigit() and int(port) > 0:
                host = values.get("metrics.host") or broker.host
                found.append(f"http://{host}:{port}/metrics")
        self.discovered_urls = found

    async def _sample_isr(self) -> None:
        """Compare each partition's ISR with the last sample's: a change is an event of the timeline (a
        shrink and expand between two samples are not seen; the brokers' logs have every one)."""
        assert self.admin is not None
        await self.admin.client.refresh_metadata()
        now = time.time()
        seen: dict[tuple[str, int], tuple[int, ...]] = {}
        for topic, info in self.admin.client.cluster.topics.items():
            for p in info.partitions.values():
                key = (topic, p.partition)
                isr = tuple(sorted(p.isr))
                seen[key] = isr
                before = self._isr.get(key)
                if before is not None and before != isr:
                    self.isr_events.appendleft(IsrChange(now, f"{topic}-{p.partition}", before, isr, p.leader))
        self._isr = seen

    async def _poll_isr_events(self) -> None:
        """The brokers' exact ISR timelines, past what each reported last (see the module docstring)."""
        urls = self.urls
        if not urls:
            self.isr_exact = False
            return
        asked = [isr_events_url(url, self._isr_after.get(url, -1)) for url in urls]
        texts = await asyncio.gather(*(asyncio.to_thread(_get, url) for url in asked), return_exceptions=True)
        served = 0
        for url, text in zip(urls, texts):
            if isinstance(text, BaseException):
                continue  # not an Odradek broker (404), down, or busy: the others still count
            try:
                answer = json.loads(text)
                highest = merge_isr_events(self.logged_isr, answer)
            except (ValueError, KeyError, TypeError):
                continue
            served += 1
            if highest > self._isr_after.get(url, -1):
                self._isr_after[url] = highest
        if len(self.logged_isr) > ISR_LOG:
            for key in sorted(self.logged_isr)[: len(self.logged_isr) - ISR_LOG]:
                del self.logged_isr[key]
        self.isr_exact = served > 0

    def isr_timeline(self, limit: int = 50) -> list[LoggedIsrChange]:
        """The newest `limit` exact changes, newest first (in metadata-log order)."""
        return [self.logged_isr[k] for k in sorted(self.logged_isr, reverse=True)[:limit]]

    async def _sample_lag(self) -> None:
        assert self.admin is not None
        groups = await self.admin.list_groups()
        now = time.time()
        for g in groups[:MAX_GROUPS]:
            if (g.group_type or "classic").lower() == "share":
                continue
            try:
                rows = await self.admin.group_lag(g.group_id)
            except OdradekError:
                continue
            self.record(g.group_id, sum(r.lag or 0 for r in rows), now, lag_by_topic(rows))

    async def _scrape(self) -> None:
        urls = self.urls
        if not urls:
            return
        texts = await asyncio.gather(*(asyncio.to_thread(_get, url) for url in urls), return_exceptions=True)
        now = time.time()
        point: dict[str, float | None] = {"t": now, "bytes_in": 0.0, "bytes_out": 0.0, "requests": 0.0}
        p99: dict[str, list[float]] = {api: [] for api in LATENCY_APIS}
        fresh = 0
        topics: dict[str, dict[str, float]] = {}
        for url, text in zip(urls, texts):
            if isinstance(text, BaseException):
                continue
            scrape = parse_scrape(text, now)
            before = self._last.get(url)
            self._last[url] = scrape
            if before is None or scrape.at <= before.at:
                continue
            fresh += 1
            span = scrape.at - before.at
            add_topic_rates(topics, before, scrape, span)
            for name in ("bytes_in", "bytes_out", "requests"):
                delta = scrape.counters.get(name, 0.0) - before.counters.get(name, 0.0)
                point[name] = (point[name] or 0.0) + max(delta, 0.0) / span
            for api in LATENCY_APIS:
                value = quantile_of_delta(before.buckets.get(api, {}), scrape.buckets.get(api, {}), 0.99)
                if value is not None:
                    p99[api].append(value * 1000)
        if fresh:
            for api in LATENCY_APIS:
                point[f"p99_{api.lower()}_ms"] = max(p99[api]) if p99[api] else None
            self.metrics.append(point)
            self._record_topics(now, topics)

    def _record_topics(self, now: float, topics: dict[str, dict[str, float]]) -> None:
        self.topic_rates = topics
        for name, rates in topics.items():
            series = self.topic_series.get(name)
            if series is None:
                if len(self.topic_series) >= MAX_TOPIC_SERIES:
                    continue  # (a topic that appears once the ring is full is shown by rate, not charted)
                series = self.topic_series[name] = deque(maxlen=HISTORY)
            series.append((now, rates.get("bytes_in", 0.0), rates.get("bytes_out", 0.0), rates.get("messages_in", 0.0)))
        for name in [n for n in self.topic_series if n not in topics]:
            del self.topic_series[name]  # deleted, or no broker reports it any more

    def topic_series_of(self, topic: str) -> dict[str, list[Any]]:
        series = self.topic_series.get(topic, deque())
        return {"t": [p[0] for p in series], "bytes_in": [p[1] for p in series], "bytes_out": [p[2] for p in series],
                "messages_in": [p[3] for p in series]}

    def lag_series(self, group_id: str) -> dict[str, list[Any]]:
        series = self.lag.get(group_id, deque())
        return {"t": [p[0] for p in series], "lag": [p[1] for p in series]}

    def latest_lag(self) -> dict[str, int]:
        return {g: s[-1][1] for g, s in self.lag.items() if s}

    def metric_series(self) -> dict[str, list[Any]]:
        keys = ("t", "bytes_in", "bytes_out", "requests", "p99_produce_ms", "p99_fetch_ms")
        return {k: [p.get(k) for p in self.metrics] for k in keys}


SHARE_TOTALS = {  # broker-wide share families -> the key a page shows them under
    "odradek_share_partitions": "share_partitions", "odradek_share_records_in_flight": "in_flight",
    "odradek_share_records_acquired": "acquired", "odradek_share_sessions": "sessions",
    "odradek_share_lock_expiries_total": "lock_expiries", "odradek_share_redeliveries_total": "redeliveries",
    "odradek_share_archived_at_limit_total": "archived_at_limit",
}
SHARE_PARTITION_PREFIX = "odradek_share_partition_"
SHARE_PARTITION_KEYS = {"records_in_flight": "in_flight", "records_acquired": "acquired",
                        "lock_expiries": "lock_expiries", "redeliveries": "redeliveries",
                        "archived_at_limit": "archived_at_limit",
                        "dlq_records": "dlq_records"}  # (KIP-1191's dead-letter queue, where a broker has one)
SHARE_MEMBER_FAMILY = "odradek_share_partition_member_records_acquired"
SHARE_DELIVERY_FAMILY = "odradek_share_partition_records_by_delivery_count"
DELIVERY_BUCKETS = ("1", "2", "3", "4+")


@dataclass
class ShareFigures:
    """The share-group figures of the brokers' /metrics, summed over the brokers scraped.

    `partitions` holds what the leaders label per share-partition, (group, topic, partition) -> figures; a
    broker labels at most 200 of its share-partitions, so `labelled` < `share_partitions` says some are left
    out. `totals` are the broker-wide figures over every share group."""

    scraped: int = 0
    errors: list[str] = field(default_factory=list)
    totals: dict[str, float] = field(default_factory=dict)
    partitions: dict[tuple[str, str, int], dict[str, float]] = field(default_factory=dict)
    # (group, topic, partition, member) -> records it holds; (group, topic, partition) -> delivery count -> records
    members: dict[tuple[str, str, int, str], float] = field(default_factory=dict)
    delivery: dict[tuple[str, str, int], dict[str, float]] = field(default_factory=dict)
    by_member: bool = False  # whether a broker exports the per-member family at all (else: "-", not 0)
    members_dropped: float = 0.0

    @property
    def labelled(self) -> int:
        return len(self.partitions)

    def acquired_by_member(self, group_id: str) -> dict[str, dict[str, float]]:
        """member -> {topic-partition: records it holds} of one group (members holding nothing are absent)."""
        out: dict[str, dict[str, float]] = {}
        for (g, t, p, member), n in sorted(self.members.items()):
            if g == group_id:
                out.setdefault(member, {})[f"{t}-{p}"] = n
        return out

    def delivery_of(self, group_id: str) -> dict[str, dict[str, float]]:
        """topic-partition -> {delivery count bucket: records} of one group."""
        return {f"{t}-{p}": v for (g, t, p), v in sorted(self.delivery.items()) if g == group_id}

    def of_group(self, group_id: str) -> dict[str, dict[str, float]]:
        """topic-partition -> figures of one group's share-partitions."""
        return {f"{t}-{p}": v for (g, t, p), v in sorted(self.partitions.items()) if g == group_id}


def parse_share_figures(texts: list[str], into: ShareFigures | None = None) -> ShareFigures:
    out = ShareFigures() if into is None else into
    for text in texts:
        out.scraped += 1
        for family in text_string_to_metric_families(text):
            if family.name == SHARE_MEMBER_FAMILY:
                out.by_member = True
            for sample in family.samples:
                name = sample.name
                if name == SHARE_MEMBER_FAMILY or name == SHARE_DELIVERY_FAMILY:
                    labels = sample.labels
                    if not labels.get("partition", "").isdigit():
                        continue
                    where = (labels.get("group", ""), labels.get("topic", ""), int(labels["partition"]))
                    if name == SHARE_MEMBER_FAMILY:
                        key4 = (*where, labels.get("member", ""))
                        out.members[key4] = out.members.get(key4, 0.0) + sample.value
                    elif labels.get("delivery_count") in DELIVERY_BUCKETS:
                        buckets = out.delivery.setdefault(where, {})
                        bucket = labels["delivery_count"]
                        buckets[bucket] = buckets.get(bucket, 0.0) + sample.value
                    continue
                if name == "odradek_share_partition_member_series_dropped":
                    out.members_dropped += sample.value
                    continue
                if name in SHARE_TOTALS:
                    key = SHARE_TOTALS[name]
                    out.totals[key] = out.totals.get(key, 0.0) + sample.value
                elif name.startswith(SHARE_PARTITION_PREFIX) and name[len(SHARE_PARTITION_PREFIX):] in SHARE_PARTITION_KEYS:
                    labels = sample.labels
                    if not labels.get("partition", "").isdigit():
                        continue
                    where = (labels.get("group", ""), labels.get("topic", ""), int(labels["partition"]))
                    key = SHARE_PARTITION_KEYS[name[len(SHARE_PARTITION_PREFIX):]]
                    row = out.partitions.setdefault(where, {})
                    row[key] = row.get(key, 0.0) + sample.value  # one leader each; summed over a handover
    return out


async def scrape_share_figures(urls: list[str]) -> ShareFigures:
    """One GET of each broker's /metrics (in worker threads, SCRAPE_TIMEOUT_S each), parsed for share groups.
    A broker that does not answer is named in `errors`; the others still count."""
    texts = await asyncio.gather(*(asyncio.to_thread(_get, url) for url in urls), return_exceptions=True)
    figures = ShareFigures()
    good = []
    for url, text in zip(urls, texts):
        if isinstance(text, BaseException):
            figures.errors.append(f"{url}: {type(text).__name__}: {text}")
        else:
            good.append(text)
    return parse_share_figures(good, figures)


def add_topic_rates(into: dict[str, dict[str, float]], before: Scrape, after: Scrape, span: float) -> None:
    """Add one broker's per-topic rates between two of its scrapes `span` seconds apart to `into`. A counter
    lower than before restarted from 0 (its broker restarted): its whole value is the increase."""
    for topic, counts in after.topics.items():
        earlier = before.topics.get(topic, {})
        row = into.setdefault(topic, {"bytes_in": 0.0, "bytes_out": 0.0, "messages_in": 0.0})
        for key, value in counts.items():
            previous = earlier.get(key, 0.0)
            row[key] = row.get(key, 0.0) + (value - previous if value >= previous else value) / span


def lag_by_topic(rows: list[Any]) -> dict[str, int]:
    """Group lag rows (Admin.group_lag) summed per topic."""
    out: dict[str, int] = {}
    for row in rows:
        out[row.topic] = out.get(row.topic, 0) + (row.lag or 0)
    return out


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:  # noqa: S310 (http only, ours)
        return response.read(8 << 20).decode("utf-8", "replace")
