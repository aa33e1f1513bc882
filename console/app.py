"""The console's HTTP side: routes, sessions, forms, and the pages rendered from templates.

Every page handler does the same three things: find the session (and with it the principal's
`ClusterReader`), ask the reader for what the page shows (cached, bounded), render a template. Mutations
are POSTs that pass one gate (`_mutation`): not --read-only, a signed-in principal where sign-in is on, the
session's CSRF token, a same-origin Origin; then they run with the principal's own client, are audited,
drop the cached answers they made stale, and redirect back to the page with the outcome as a flash
message (post/redirect/get, so a reload never repeats a change).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import pathlib
import re
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable

from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from odradek.client.admin import AclBinding, Admin
from odradek.client.cluster import TopicPartition
from odradek.client.config import ClientConfig
from odradek.client.connection import ClientSecurity
from odradek.client.errors import ConfigError, KafkaError, OdradekError

from .auth import SESSION_COOKIE, Audit, Session, Sessions, origin_ok
from .filter import FilterError, parse_filter
from .reader import ClusterReader, TtlCache, describe_error, who_can
from .records import DEFAULT_LIMIT, DEFAULT_SCAN, FORMATS, BrowseError, BrowseRequest, browse, export_csv, \
    export_json, produce_one, render
from .sampler import Sampler, ShareFigures, lag_by_topic, scrape_share_figures

HERE = pathlib.Path(__file__).resolve().parent
MAX_FORM_FIELD = 1 << 20  # a produced value or a header may be up to 1 MiB of text
# Record browses running at once, over every user: each reads up to its scan bound from the cluster, so the
# console's load on the brokers is bounded by this times the bound, however many tabs are open.
CONCURRENT_BROWSES = 4


@dataclass
class ConsoleSettings:
    config: ClientConfig  # the connection settings (bootstrap, TLS, SASL mechanism) every session starts from
    signin_required: bool
    auth: str = ""  # "sasl", "mtls" or "none" (how users sign in; "" derives it from signin_required)
    read_only: bool = False
    metrics_urls: list[str] = field(default_factory=list)
    sample_interval_s: float = 5.0
    cache_ttl_s: float = 2.0
    browse_seconds: float = 30.0  # the time bound of one browse, besides its record bounds
    certfile: str | None = None  # HTTPS (uvicorn's TLS); the session cookie is then Secure
    keyfile: str | None = None
    own_credentials: bool = False  # the console was given a principal of its own (-X sasl.username=...)

    def __post_init__(self) -> None:
        if not self.auth:
            self.auth = "sasl" if self.signin_required else "none"


class Console:
    """The running console: settings, sessions, the cache, the sampler, and the console's own client."""

    def __init__(self, settings: ConsoleSettings):
        self.settings = settings
        self.sessions = Sessions()
        self.audit = Audit()
        self.cache = TtlCache(settings.cache_ttl_s)
        self.service_admin: Admin | None = None
        self.sampler = Sampler(None, settings.metrics_urls, settings.sample_interval_s)
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.filters["when"] = _when
        self.templates.env.filters["size"] = _size
        self.templates.env.filters["per_s"] = _per_second
        # Jinja's own urlencode leaves "/" as it is; a group id may contain one (any string is a group id),
        # and a link to /groups/a/b would name another page: every URL part is quoted whole.
        self.templates.env.filters["urlencode"] = _url_part
        self.templates.env.filters["tp"] = lambda tps: ", ".join(f"{tp.topic}-{tp.partition}" for tp in tps) or "-"
        self.started_at = time.time()
        self._expiry: asyncio.Task | None = None
        self.browse_slots = asyncio.Semaphore(CONCURRENT_BROWSES)

    async def start(self) -> None:
        # The console's own client connects on first use (a page, the sampler), not here: a console started
        # before its cluster, or while it is down, serves pages that say so instead of failing to start.
        if not self.settings.signin_required or self.settings.own_credentials:
            self.service_admin = Admin(self.settings.config)
            self.sampler.admin = self.service_admin
        self.sampler.start()
        self._expiry = asyncio.get_running_loop().create_task(self._expire_sessions(), name="console-sessions")

    async def _expire_sessions(self) -> None:
        while True:
            await asyncio.sleep(30)
            await self.sessions.expire()

    async def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        await self.sampler.stop()
        await self.sessions.close_all()
        if self.service_admin is not None:
            await self.service_admin.close()

    # ------------------------------------------------------------------------------------------ sessions

    def session_of(self, request: Request) -> tuple[Session, bool]:
        """(the request's session, whether it is new and needs its cookie set)."""
        session = self.sessions.get(request.cookies.get(SESSION_COOKIE))
        if session is not None:
            return session, False
        session = self.sessions.new()
        if not self.settings.signin_required:
            session.principal = "console"  # the console's own connections (plaintext / mTLS cluster)
        return session, True

    def reader_for(self, session: Session) -> ClusterReader:
        if self.settings.signin_required:
            assert session.admin is not None and session.principal is not None
            return ClusterReader(session.admin, self.cache, session.principal)
        assert self.service_admin is not None
        return ClusterReader(self.service_admin, self.cache, "console")

    async def share_figures(self) -> ShareFigures | None:
        """The share-group figures of every broker's /metrics (the URLs the sampler scrapes), fetched when a
        share-group page asks and cached like the reader's answers (one scrape per broker per TTL, whoever
        asks); None when the console knows no /metrics URL."""
        urls = self.sampler.urls
        if not urls:
            return None
        return await self.cache.get(("share_metrics", tuple(urls)), lambda: scrape_share_figures(urls))

    def config_for(self, session: Session) -> ClientConfig:
        return session.config if session.config is not None else self.settings.config

    def principal_of(self, session: Session) -> str:
        if self.settings.auth == "mtls":
            return f"mTLS {session.principal}" if session.principal is not None else "(not signed in)"
        if not self.settings.signin_required:
            if self.settings.config.security_protocol == "SSL":
                return "the console's certificate (mTLS)"
            return "ANONYMOUS (plaintext)"
        return f"User:{session.principal}"


def _when(ms: int | float | None) -> str:
    if ms is None or ms < 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(n)


def _per_second(value: float | None, unit: str = "B") -> str:
    """A rate for a table cell: bytes per second with a binary prefix ("1.5 KiB/s"), anything else as a number
    per second ("120/s"); "-" when unknown."""
    if value is None:
        return "-"
    if unit == "B":
        return _size(int(round(value))) + "/s"
    return f"{value:.0f}/s" if value >= 10 or value == 0 else f"{value:.1f}/s"


def build_app(console: Console) -> Starlette:
    settings = console.settings

    def with_cookie(response: Response, session: Session, new: bool) -> Response:
        if new:
            response.set_cookie(SESSION_COOKIE, session.token, httponly=True, samesite="strict", path="/",
                                secure=settings.certfile is not None)
        return response

    async def page(request: Request, template: str,
                   load: Callable[[ClusterReader, Session], Awaitable[dict[str, Any]]]) -> Response:
        session, new = console.session_of(request)
        if settings.signin_required and session.principal is None:
            return with_cookie(RedirectResponse(f"/login?next={urllib.parse.quote(request.url.path)}", 303), session, new)
        reader = console.reader_for(session)
        context: dict[str, Any] = {}
        error = None
        try:
            await reader.admin.start()  # at once when connected; bounded by the config's timeouts when not
            context = await load(reader, session)
        except (OdradekError, BrowseError, FilterError, ConfigError, TimeoutError, OSError) as e:
            error = describe_error(e)
        flashes, session.flashes = session.flashes, []
        context.update(
            error=error, flashes=flashes, principal=console.principal_of(session), csrf=session.csrf,
            can_mutate=not settings.read_only, read_only=settings.read_only,
            signin=settings.signin_required, path=request.url.path)
        # A page whose data could not be read shows the reason alone (its template expects the data).
        response = console.templates.TemplateResponse(request, template if error is None else "error.html", context,
                                                      status_code=200 if error is None else 502)
        return with_cookie(response, session, new)

    async def mutation(request: Request, action: str, target: str,
                       run: Callable[[ClusterReader, Session, Any], Awaitable[str]], back: str) -> Response:
        """The one gate every change passes (see the module docstring), then the change, audited."""
        session, new = console.session_of(request)
        if settings.read_only:
            console.audit.record(console.principal_of(session), action, target, "refused: the console is read-only")
            return PlainTextResponse("the console runs --read-only: it changes nothing", 403)
        if settings.signin_required and session.principal is None:
            console.audit.record("(not signed in)", action, target, "refused: not signed in")
            return PlainTextResponse("sign in first", 403)
        form = await request.form(max_part_size=MAX_FORM_FIELD)
        token = request.headers.get("x-csrf-token") or str(form.get("csrf_token") or "")
        if new or not session.csrf_ok(token) or not origin_ok(request.headers.get("origin"), request.headers.get("host")):
            console.audit.record(console.principal_of(session), action, target, "refused: no valid CSRF token")
            return PlainTextResponse("refused: this form was not sent from this console's page (CSRF check)", 403)
        reader = console.reader_for(session)
        try:
            await reader.admin.start()
            outcome = await run(reader, session, form)
        except (OdradekError, BrowseError, FilterError, ConfigError, ValueError, TimeoutError, OSError) as e:
            message = describe_error(e) if not isinstance(e, TimeoutError) else "no answer from the cluster in time"
            console.audit.record(console.principal_of(session), action, target, f"failed: {message}")
            session.flashes.append(("error", f"{action} {target}: {message}"))
        else:
            console.audit.record(console.principal_of(session), action, target, "ok", result=outcome)
            session.flashes.append(("ok", outcome))
        return RedirectResponse(back, 303)

    # ------------------------------------------------------------------------------------------ pages

    async def cluster_page(request: Request) -> Response:
        async def load(reader: ClusterReader, session: Session) -> dict[str, Any]:
            cluster = await reader.cluster()
            leaderships = await reader.leaderships()
            log_dirs = await reader.log_dirs()
            quorum = await reader.quorum()
            sampler = console.sampler
            exact = sampler.isr_exact or bool(sampler.logged_isr)  # (the brokers' own timeline, when they serve it)
            events = sampler.isr_timeline(50) if exact else list(sampler.isr_events)[:50] if sampler.admin is not None \
                else None
            return {"cluster": cluster, "leaderships": leaderships, "log_dirs": log_dirs, "quorum": quorum,
                    "isr_events": events, "isr_exact": exact, "interval_s": settings.sample_interval_s,
                    "title": "Cluster"}
        return await page(request, "cluster.html", load)

    async def banner(request: Request) -> Response:
        session, new = console.session_of(request)
        if settings.signin_required and session.principal is None:
            return HTMLResponse("")
        try:
            reader = console.reader_for(session)
            await reader.admin.start()
            health = await reader.health()
        except OdradekError as e:
            return HTMLResponse(f'<div class="banner bad">{_escape(describe_error(e))}</div>')
        return console.templates.TemplateResponse(request, "_banner.html", {"health": health})

    async def topics_page(request: Request) -> Response:
        async def load(reader: ClusterReader, session: Session) -> dict[str, Any]:
            internal = request.query_params.get("internal") == "1"
            rows = await reader.topics(internal=internal)
            groups = await reader.groups()
            lag = console.sampler.latest_lag()
            return {"topics": rows, "internal": internal, "lag": lag, "groups": groups, "title": "Topics",
                    "readers": await _readers_by_topic(reader, groups), "rates": console.sampler.topic_rates,
                    "has_rates": bool(console.sampler.urls)}
        return await page(request, "topics.html", load)

    async def _readers_by_topic(reader: ClusterReader, groups: list[Any]) -> dict[str, list[tuple[str, int | None]]]:
        """topic -> [(group, its lag on the topic)] from the lag the sampler last recorded, for the groups this
        principal can list (the topic list never computes lag itself)."""
        out: dict[str, list[tuple[str, int | None]]] = {}
        for g in groups:
            for topic, lag in sorted(console.sampler.topic_lag.get(g.group_id, {}).items()):
                out.setdefault(topic, []).append((g.group_id, lag))
        return out

    async def topic_page(request: Request) -> Response:
        name = request.path_params["name"]

        async def load(reader: ClusterReader, session: Session) -> dict[str, Any]:
            partitions, configs = await reader.topic(name)
            return {"name": name, "partitions": partitions, "configs": configs, "title": f"Topic {name}",
                    "rates": console.sampler.topic_rates.get(name), "has_rates": bool(console.sampler.urls),
                    "interval_s": settings.sample_interval_s}
        return await page(request, "topic.html", load)

    async def topic_throughput_json(request: Request) -> Response:
        """The topic's bytes in/out and records in per second, as the sampler derived them from the brokers'
        per-topic counters (no cluster request: the sampler's ring is all it reads)."""
        session, new = console.session_of(request)
        name = request.path_params["name"]
        if settings.signin_required:
            if session.principal is None:
                return JSONResponse({"error": "sign in first"}, 403)
            try:  # the viewer's own topic list (cached; its DESCRIBE ACLs decide) says whether it may see this one
                reader = console.reader_for(session)
                await reader.admin.start()
                if name not in {t["name"] for t in await reader.topics(internal=True)}:
                    return JSONResponse({"error": f"no topic {name} visible to this principal"}, 404)
            except OdradekError as e:
                return JSONResponse({"error": describe_error(e)}, 502)
        return JSONResponse(console.sampler.topic_series_of(name))

    def _browse_request(request: Request) -> tuple[BrowseRequest, str]:
        q = request.query_params
        name = request.path_params["name"]

        def number(key: str, default: int) -> int:
            text = q.get(key, "").strip()
            if not text:
                return default
            try:
                return int(text)
            except ValueError:
                raise BrowseError(f"{key} must be a whole number, not {text!r}") from None

        partition_text = q.get("partition", "").strip()
        expression = q.get("filter", "").strip()
        fmt = q.get("format", "auto")
        if fmt not in FORMATS:
            raise BrowseError(f"format must be one of {', '.join(FORMATS)}")
        start = q.get("start", "latest")
        timestamp_ms = 0
        if start == "timestamp":
            text = q.get("timestamp", "").strip()
            try:
                timestamp_ms = int(text) if text.isdigit() else int(datetime.datetime.fromisoformat(
                    text.replace("Z", "+00:00")).timestamp() * 1000)
            except ValueError:
                raise BrowseError(f"a timestamp is epoch milliseconds or ISO 8601 (2026-01-31T12:00:00Z), "
                                  f"not {text!r}") from None
        return BrowseRequest(
            name, partition=None if partition_text in ("", "all") else number("partition", 0), start=start,
            offset=number("offset", 0), timestamp_ms=timestamp_ms, limit=number("limit", DEFAULT_LIMIT),
            max_scan=number("max_scan", DEFAULT_SCAN), filter=parse_filter(expression) if expression else None,
            max_seconds=settings.browse_seconds), fmt

    async def records_page(request: Request) -> Response:
        name = request.path_params["name"]

        async def load(reader: ClusterReader, session: Session) -> dict[str, Any]:
            partitions = await reader.admin.client.partitions_for(name, must_exist=True)
            context: dict[str, Any] = {"name": name, "partitions": sorted(partitions), "q": request.query_params,
                                       "title": f"Records of {name}", "formats": FORMATS, "result": None,
                                       "browse_error": None, "rows": [],
                                       "default_limit": DEFAULT_LIMIT, "default_scan": DEFAULT_SCAN}
            if request.query_params.get("go"):
                try:
                    browse_request, fmt = _browse_request(request)
                    async with console.browse_slots:
                        result = await browse(console.config_for(session), reader.admin.client, browse_request)
                except (BrowseError, FilterError) as e:
                    context["browse_error"] = str(e)
                    return context
                context["result"] = result
                context["rows"] = [{
                    "partition": r.partition, "offset": r.offset, "timestamp": r.timestamp,
                    "key": render(r.key, fmt), "value": render(r.value, fmt),
                    "headers": [(k, render(v, "auto" if fmt == "json" else fmt)[0]) for k, v in r.headers],
                } for r in result.records]
                context["export_query"] = str(request.query_params)
            return context
        return await page(request, "records.html", load)

    async def export(request: Request) -> Response:
        session, new = console.session_of(request)
        if settings.signin_required and session.principal is None:
            return PlainTextResponse("sign in first", 403)
        fmt = request.path_params["fmt"]
        try:
            browse_request, _ = _browse_request(request)
            admin = console.reader_for(session).admin
            await admin.start()
            async with console.browse_slots:
                result = await browse(console.config_for(session), admin.client, browse_request)
        except (BrowseError, FilterError, OdradekError) as e:
            return PlainTextResponse(describe_error(e), 400)
        name = request.path_params["name"]
        headers = {"Content-Disposition": f'attachment; filename="{name}-records.{fmt}"',
                   "X-Odradek-Stopped": result.stopped, "X-Odradek-Scanned": str(result.scanned)}
        if fmt == "csv":
            return Response(export_csv(result.records), media_type="text/csv", headers=headers)
        return Response(export_json(result.records), media_type="application/json", headers=headers)

    async def produce(request: Request) -> Response:
        name = request.path_params["name"]

        async def run(reader: ClusterReader, session: Session, form: Any) -> str:
            def field_bytes(key: str) -> bytes | None:
                text = form.get(key)
                if text is None or (key == "key" and text == "" and form.get("key_null")):
                    return None
                return str(text).encode("utf-8")

            partition_text = str(form.get("partition") or "").strip()
            partition = int(partition_text) if partition_text not in ("", "any") else None
            headers: list[tuple[str, bytes | None]] = []
            for line in str(form.get("headers") or "").splitlines():
                if not line.strip():
                    continue
                hkey, sep, hvalue = line.partition("=")
                if not sep or not hkey.strip():
                    raise ValueError(f"a header is name=value, one per line: {line!r}")
                headers.append((hkey.strip(), hvalue.encode("utf-8")))
            key = field_bytes("key") or None
            value = None if form.get("value_null") else field_bytes("value")
            p, offset = await produce_one(console.config_for(session), name, partition, key, value, headers)
            reader.cache.forget("topic")
            return f"produced to {name}-{p} at offset {offset}"
        return await mutation(request, "record.produce", name, run, f"/topics/{name}/records")

    async def groups_page(request: Request) -> Response:
        async def load(reader: ClusterReader, session: Session) -> dict[str, Any]:
            groups = await reader.groups()
            return {"groups": groups, "lag": console.sampler.latest_lag(), "title": "Groups"}
        return await page(request, "groups.html", load)

    async def group_page(request: Request) -> Response:
        group_id = request.path_params["group_id"]

        async def load(reader: ClusterReader, session: Session) -> dict[str, Any]:
            view = await reader.group(group_id)
            lag = [] if view.group_type == "share" else await reader.group_lag(group_id)
            if lag:
                console.sampler.record(group_id, sum(r.lag or 0 for r in lag), per_topic=lag_by_topic(lag))
            topics = sorted({r.topic for r in lag})
            return {"group": view, "lag": lag, "topics": topics, "total_lag": sum(r.lag or 0 for r in lag),
                    "title": f"Group {group_id}"}
        return await page(request, "group.html", load)

    async def group_lag_json(request: Request) -> Response:
        group_id = request.query_params.get("group", "")
        session, new = console.session_of(request)
        if settings.signin_required and session.principal is None:
            return JSONResponse({"error": "sign in first"}, 403)
        if console.sampler.admin is None:  # no principal of the console's own: the viewer's poll samples
            try:
                reader = console.reader_for(session)
                await reader.admin.start()
                rows = await reader.group_lag(group_id)
                console.sampler.record(group_id, sum(r.lag or 0 for r in rows), per_topic=lag_by_topic(rows))
            except OdradekError as e:
                return JSONResponse({"error": describe_error(e)}, 502)
        return JSONResponse(console.sampler.lag_series(group_id))

    async def group_reset(request: Request) -> Response:
        group_id = request.path_params["group_id"]

        async def run(reader: ClusterReader, session: Session, form: Any) -> str:
            to = str(form.get("to") or "")
            topic = str(form.get("topic") or "")
            lag = await reader.group_lag(group_id)
            partitions = [TopicPartition(r.topic, r.partition) for r in lag if not topic or r.topic == topic]
            if topic and not partitions:
                partitions = [TopicPartition(topic, p) for p in await reader.admin.client.partitions_for(topic, must_exist=True)]
            kwargs: dict[str, Any] = {}
            if to == "timestamp":
                text = str(form.get("value") or "").strip()
                kwargs["timestamp_ms"] = int(text) if text.isdigit() else int(datetime.datetime.fromisoformat(
                    text.replace("Z", "+00:00")).timestamp() * 1000)
            elif to == "offset":
                text = str(form.get("value") or "").strip()
                if not text.lstrip("-").isdigit():
                    raise ValueError(f"an offset is a whole number, not {text!r}")
                kwargs["offset"] = int(text)
            elif to not in ("earliest", "latest"):
                raise ValueError(f"reset to earliest, latest, timestamp or offset, not {to!r}")
            target = await reader.admin.reset_group_offsets(group_id, partitions, to=to, **kwargs)
            reader.cache.forget("group_lag", "group", "groups")
            return f"reset {group_id}: " + ", ".join(f"{tp.topic}-{tp.partition}→{o}" for tp, o in sorted(target.items()))
        return await mutation(request, "group.reset-offsets", group_id, run, f"/groups/{_url_part(group_id)}")

    async def group_delete(request: Request) -> Response:
        group_id = request.path_params["group_id"]

        async def run(reader: ClusterReader, session: Session, form: Any) -> str:
            error = (await reader.admin.delete_groups([group_id]))[group_id]
            if error is not None:
                raise error
            reader.cache.forget("group_lag", "group", "groups")
            return f"deleted group {group_id}"
        return await mutation(request, "group.delete", group_id, run, "/groups")

    async def share_groups_page(request: Request) -> Response:
        async def load(reader: ClusterReader, session: Session) -> dict[str, Any]:
            groups = [g for g in await reader.groups() if g.group_type == "share"]
            return {"groups": groups, "title": "Share groups"}
        return await page(request, "share_groups.html", load)

    async def share_group_page(request: Request) -> Response:
        group_id = request.path_params["group_id"]

        async def load(reader: ClusterReader, session: Session) -> dict[str, Any]:
            view, partitions = await reader.share_group(group_id)
            figures = await console.share_figures()
            held = figures.of_group(group_id) if figures is not None else {}
            rows = {r["partition"]: r for r in partitions}
            for name, values in held.items():  # a leader may hold state the coordinator has not listed yet
                rows.setdefault(name, {"partition": name, "start_offset": None, "leader_epoch": None, "lag": None,
                                       "error": None}).update({k: int(v) for k, v in values.items()})
            topics = sorted({name.rpartition("-")[0] for name in rows} | {t for m in view.members for t in m.subscribed})
            by_member = figures.acquired_by_member(group_id) if figures is not None else {}
            for name, buckets in (figures.delivery_of(group_id) if figures is not None else {}).items():
                if name in rows:
                    rows[name]["delivery"] = {k: int(v) for k, v in buckets.items()}
            return {"group": view, "partitions": [rows[k] for k in sorted(rows)], "figures": figures,
                    "member_acquired": {m: int(sum(v.values())) for m, v in by_member.items()},
                    "member_holds": by_member,
                    "in_flight": sum(int(v.get("in_flight", 0)) for v in held.values()),
                    "acquired": sum(int(v.get("acquired", 0)) for v in held.values()),
                    "topics": topics, "title": f"Share group {group_id}"}
        return await page(request, "share_group.html", load)

    async def share_group_reset(request: Request) -> Response:
        group_id = request.path_params["group_id"]

        async def run(reader: ClusterReader, session: Session, form: Any) -> str:
            to = str(form.get("to") or "")
            topic = str(form.get("topic") or "")
            kwargs: dict[str, Any] = {}
            text = str(form.get("value") or "").strip()
            if to == "timestamp":
                try:
                    kwargs["timestamp_ms"] = int(text) if text.isdigit() else int(datetime.datetime.fromisoformat(
                        text.replace("Z", "+00:00")).timestamp() * 1000)
                except ValueError:
                    raise ValueError(f"a timestamp is epoch milliseconds or ISO 8601, not {text!r}") from None
            elif to == "offset":
                if not text.lstrip("-").isdigit():
                    raise ValueError(f"an offset is a whole number, not {text!r}")
                kwargs["offset"] = int(text)
            elif to not in ("earliest", "latest"):
                raise ValueError(f"reset to earliest, latest, timestamp or offset, not {to!r}")
            # The share-partitions the group has state for (of `topic` if one is chosen); a topic the group
            # never read is reset on all its partitions, as kafka-share-groups --reset-offsets --topic does.
            offsets = await reader.admin.share_group_offsets(group_id)
            partitions = [TopicPartition(r.topic, r.partition) for r in offsets if not topic or r.topic == topic]
            if topic and not partitions:
                partitions = [TopicPartition(topic, p) for p in await reader.admin.client.partitions_for(topic, must_exist=True)]
            if not partitions:
                raise ValueError("the group has no share-partition state: choose a topic to reset")
            target = await reader.admin.reset_share_group_offsets(group_id, partitions, to=to, **kwargs)
            reader.cache.forget("share_group", "group", "groups")
            return f"reset share group {group_id}: " + ", ".join(
                f"{tp.topic}-{tp.partition}→{o}" for tp, o in sorted(target.items()))
        return await mutation(request, "share-group.reset-offsets", group_id, run, f"/share-groups/{_url_part(group_id)}")

    async def share_group_delete(request: Request) -> Response:
        group_id = request.path_params["group_id"]

        async def run(reader: ClusterReader, session: Session, form: Any) -> str:
            error = (await reader.admin.delete_groups([group_id]))[group_id]
            if error is not None:
                raise error
            reader.cache.forget("share_group", "group", "groups")
            return f"deleted share group {group_id}"
        return await mutation(request, "share-group.delete", group_id, run, "/share-groups")

    async def transactions_page(request: Request) -> Response:
        async def load(reader: ClusterReader, session: Session) -> dict[str, Any]:
            rows = await reader.transactions()
            now_ms = int(time.time() * 1000)
            for r in rows:
                r["age_ms"] = now_ms - r["start_ms"] if r["start_ms"] else None
            return {"transactions": rows, "title": "Transactions"}
        return await page(request, "transactions.html", load)

    async def transaction_abort(request: Request) -> Response:
        async def run(reader: ClusterReader, session: Session, form: Any) -> str:
            partition_text = str(form.get("partition") or "")
            topic, sep, index = partition_text.rpartition("-")
            if not sep or not index.isdigit():
                raise ValueError(f"a partition is topic-N, not {partition_text!r}")
            producer_id = int(str(form.get("producer_id") or "-1"))
            epoch = await reader.abort_transaction(TopicPartition(topic, int(index)), producer_id)
            reader.cache.forget("transactions")
            return f"aborted the transaction of producer {producer_id} (epoch {epoch}) on {partition_text}"
        return await mutation(request, "transaction.abort", "transaction", run, "/transactions")

    async def security_page(request: Request) -> Response:
        async def load(reader: ClusterReader, session: Session) -> dict[str, Any]:
            acls = await reader.acls()
            rtype = request.query_params.get("resource_type", "topic")
            rname = request.query_params.get("resource_name", "")
            by_principal: dict[str, list[AclBinding]] = {}
            by_resource: dict[str, list[AclBinding]] = {}
            if not isinstance(acls, str):
                for b in acls:
                    by_principal.setdefault(b.principal or "?", []).append(b)
                    by_resource.setdefault(f"{b.resource_type}:{b.pattern_type}:{b.name}", []).append(b)
            return {"acls": acls, "by_principal": by_principal, "by_resource": by_resource,
                    "who": who_can(acls, rtype, rname) if rname and not isinstance(acls, str) else None,
                    "resource_type": rtype, "resource_name": rname,
                    "users": await reader.scram_users(), "quotas": await reader.quotas(), "title": "Security"}
        return await page(request, "security.html", load)

    async def acl_add(request: Request) -> Response:
        async def run(reader: ClusterReader, session: Session, form: Any) -> str:
            binding = AclBinding(str(form.get("resource_type") or ""), str(form.get("resource_name") or ""),
                                 str(form.get("pattern_type") or "literal"), str(form.get("principal") or ""),
                                 str(form.get("host") or "*"), str(form.get("operation") or ""),
                                 str(form.get("permission") or "allow"))
            if not binding.principal or ":" not in binding.principal:
                raise ValueError("a principal is Type:name, e.g. User:alice")
            (error,) = await reader.admin.create_acls([binding])
            if error is not None:
                raise error
            reader.cache.forget("acls")
            return f"added: {binding}"
        return await mutation(request, "acl.add", "acls", run, "/security")

    async def acl_delete(request: Request) -> Response:
        async def run(reader: ClusterReader, session: Session, form: Any) -> str:
            binding = AclBinding(*(str(form.get(k) or "") for k in (
                "resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission")))
            (removed,) = await reader.admin.delete_acls([binding])
            reader.cache.forget("acls")
            return f"removed {len(removed)} binding(s): {binding}"
        return await mutation(request, "acl.delete", "acls", run, "/security")

    async def charts_page(request: Request) -> Response:
        async def load(reader: ClusterReader, session: Session) -> dict[str, Any]:
            return {"urls": console.sampler.urls, "sampler_error": console.sampler.last_error,
                    "interval_s": settings.sample_interval_s, "title": "Throughput and latency"}
        return await page(request, "charts.html", load)

    async def chart_series(request: Request) -> Response:
        session, new = console.session_of(request)
        if settings.signin_required and session.principal is None:
            return JSONResponse({"error": "sign in first"}, 403)
        return JSONResponse(console.sampler.metric_series())

    async def audit_page(request: Request) -> Response:
        async def load(reader: ClusterReader, session: Session) -> dict[str, Any]:
            return {"entries": list(console.audit.entries), "title": "Audit"}
        return await page(request, "audit.html", load)

    # ------------------------------------------------------------------------------------------ sign-in

    async def login_page(request: Request) -> Response:
        session, new = console.session_of(request)
        if not settings.signin_required:
            return RedirectResponse("/", 303)
        context: dict[str, Any] = {"csrf": session.csrf, "error": None, "login_error": None, "next": _local(request.query_params.get("next", "/")),
                   "mechanism": settings.config.sasl_mechanism, "auth": settings.auth, "title": "Sign in", "principal": None,
                   "signin": True, "flashes": [], "path": "/login", "can_mutate": False, "read_only": settings.read_only}
        return with_cookie(console.templates.TemplateResponse(request, "login.html", context), session, new)

    async def login(request: Request) -> Response:
        session, new = console.session_of(request)
        if not settings.signin_required:
            return RedirectResponse("/", 303)
        # A sign-in form is small (a certificate and a key are a few KB). Bounding the body by its declared
        # length (which the HTTP server holds the body to) keeps every uploaded part in memory: the form
        # parser spools a file to disk only past 1 MiB.
        declared = request.headers.get("content-length", "")
        if not declared.isdigit() or int(declared) > MAX_SIGNIN_BYTES:
            return PlainTextResponse(f"refused: a sign-in form is at most {MAX_SIGNIN_BYTES // 1024} KiB, "
                                     "sent with its Content-Length", 413)
        async with request.form(max_files=2, max_fields=10, max_part_size=MAX_SIGNIN_BYTES) as form:
            next_path = _local(str(form.get("next") or "/"))
            if new or not session.csrf_ok(str(form.get("csrf_token") or "")) or not origin_ok(
                    request.headers.get("origin"), request.headers.get("host")):
                return PlainTextResponse("refused: this form was not sent from this console's page (CSRF check)", 403)
            if settings.auth == "mtls":
                principal, config, error = await _mtls_sign_in(form)
                username = ""
            else:
                username = str(form.get("username") or "").strip()
                password = str(form.get("password") or "")
                principal, config, error = username, None, None
                if not username or not password:
                    error = "give a username and a password"
                else:
                    config = settings.config.replace(sasl_username=username, sasl_password=password,
                                                     client_id=f"odradek-console-{username}")
        who = f"User:{username}" if settings.auth == "sasl" else f"mTLS {principal or '(no certificate)'}"
        if config is not None and error is None:
            admin = Admin(config)
            try:
                await admin.start()
                await admin.describe_cluster()
            except (OdradekError, OSError, TimeoutError) as e:
                await admin.close()
                error = f"sign-in refused: {_sign_in_error(e, settings.auth)}"
            else:
                fresh = console.sessions.new()  # a new token at sign-in: a planted cookie gains nothing
                fresh.principal, fresh.config, fresh.admin = principal, config, admin
                console.sessions.drop(session)
                console.audit.record(who, "sign-in", "console", "ok")
                return with_cookie(RedirectResponse(next_path, 303), fresh, True)
        console.audit.record(who, "sign-in", "console", f"refused: {error}")
        context: dict[str, Any] = {"csrf": session.csrf, "error": None, "login_error": error, "next": next_path, "mechanism": settings.config.sasl_mechanism,
                   "auth": settings.auth, "title": "Sign in", "principal": None, "signin": True, "flashes": [], "path": "/login",
                   "can_mutate": False, "read_only": settings.read_only, "username": username}
        return console.templates.TemplateResponse(request, "login.html", context, status_code=401)

    async def _mtls_sign_in(form: Any) -> tuple[str | None, ClientConfig | None, str | None]:
        """(the certificate's subject, the session's client config, None) or (subject?, None, why not) from
        the sign-in form's certificate, private key and optional key password. The PEMs stay in memory: in
        the returned config (repr=False) and, once connected, in the session's TLS context."""
        texts: dict[str, str] = {}
        for name, what in (("certificate", "certificate"), ("private_key", "private key")):
            part = form.get(name)
            data = await part.read() if isinstance(part, UploadFile) else str(part or "").encode("utf-8")
            try:
                texts[name] = data.decode("ascii")
            except UnicodeDecodeError:
                return None, None, f"the {what} is not PEM text (-----BEGIN ...-----)"
            if not texts[name].strip():
                return None, None, f"choose your {what} file (PEM)"
        try:
            subject = certificate_subject(texts["certificate"])
        except ValueError as e:
            return None, None, str(e)
        password = str(form.get("key_password") or "") or None
        config = settings.config.replace(
            ssl_certificate_location=None, ssl_key_location=None, ssl_keystore_location=None,
            ssl_keystore_password=None, ssl_certificate_pem=texts["certificate"], ssl_key_pem=texts["private_key"],
            ssl_key_password=password, client_id="odradek-console-" + re.sub(r"[^A-Za-z0-9._-]+", "_", subject)[:100])
        try:
            ClientSecurity.from_config(config)  # the key is the certificate's and opens: refused here if not
        except OdradekError as e:
            return subject, None, f"sign-in refused: {describe_error(e)}"
        return subject, config, None

    async def logout(request: Request) -> Response:
        session, new = console.session_of(request)
        form = await request.form()
        if not session.csrf_ok(str(form.get("csrf_token") or "")):
            return PlainTextResponse("refused: CSRF check", 403)
        console.sessions.drop(session)
        console.audit.record(console.principal_of(session), "sign-out", "console", "ok")
        await session.forget()  # the user's password or private key goes with the session
        response = RedirectResponse("/login", 303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def metrics(request: Request) -> Response:
        """The console's own counters (changes asked, by outcome), for the same Prometheus as the brokers."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(console.audit.registry), media_type=CONTENT_TYPE_LATEST)

    routes = [
        Route("/", cluster_page), Route("/banner", banner),
        Route("/topics", topics_page), Route("/topics/{name}", topic_page),
        Route("/topics/{name}/throughput.json", topic_throughput_json),
        Route("/topics/{name}/records", records_page), Route("/topics/{name}/export.{fmt:str}", export),
        Route("/topics/{name}/produce", produce, methods=["POST"]),
        # A group id is any string, "/" included: the POST routes take the id up to their last path part,
        # the page takes the whole rest of the path, and the lag series names its group in the query.
        Route("/groups", groups_page), Route("/lag.json", group_lag_json),
        Route("/groups/{group_id:path}/reset", group_reset, methods=["POST"]),
        Route("/groups/{group_id:path}/delete", group_delete, methods=["POST"]),
        Route("/groups/{group_id:path}", group_page),
        Route("/share-groups", share_groups_page),
        Route("/share-groups/{group_id:path}/reset", share_group_reset, methods=["POST"]),
        Route("/share-groups/{group_id:path}/delete", share_group_delete, methods=["POST"]),
        Route("/share-groups/{group_id:path}", share_group_page),
        Route("/transactions", transactions_page), Route("/transactions/abort", transaction_abort, methods=["POST"]),
        Route("/security", security_page), Route("/security/acls/add", acl_add, methods=["POST"]),
        Route("/security/acls/delete", acl_delete, methods=["POST"]),
        Route("/charts", charts_page), Route("/charts/series.json", chart_series),
        Route("/audit", audit_page),
        Route("/login", login_page), Route("/login", login, methods=["POST"]), Route("/logout", logout, methods=["POST"]),
        Route("/healthz", healthz), Route("/metrics", metrics),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await console.start()
        try:
            yield
        finally:
            await console.stop()

    return Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(SecurityHeaders)])


# What a page may load and run. Scripts come from the console's own /static (plus the few inline <script>
# blocks the templates write, which hold no value a user chose); script-src-attr 'none' refuses every on*
# handler attribute, the place where an HTML-escaped value turns back into live JavaScript (an escaped
# quote is a quote again once the attribute is parsed). Nothing is framed (a delete button under someone
# else's page), and forms post only here.
CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self' 'unsafe-inline'; script-src-attr 'none'; "
                           "style-src 'self' 'unsafe-inline'; img-src 'self' data:; object-src 'none'; "
                           "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


class SecurityHeaders:
    """Adds CONTENT_SECURITY_POLICY, nosniff and a same-origin referrer policy to every HTTP response."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
                headers["X-Content-Type-Options"] = "nosniff"
                headers["Referrer-Policy"] = "same-origin"
            await send(message)
        await self.app(scope, receive, with_headers)


def _url_part(text: Any) -> str:
    """One part of a URL path or query value, every reserved character quoted ("/" too)."""
    return urllib.parse.quote(str(text), safe="")


MAX_SIGNIN_BYTES = 64 * 1024


def certificate_subject(pem: str) -> str:
    """The subject of the first certificate in `pem` as RFC 2253 text ("CN=alice,OU=eng,O=Org"), the name
    Kafka's default principal builder gives it (User:<subject>) before ssl.principal.mapping.rules; ValueError
    when it is not a PEM certificate."""
    from cryptography import x509

    try:
        return x509.load_pem_x509_certificate(pem.encode("ascii")).subject.rfc4514_string()
    except ValueError:
        raise ValueError("the certificate is not a PEM X.509 certificate (-----BEGIN CERTIFICATE-----)") from None


def _sign_in_error(error: BaseException, auth: str) -> str:
    """Why connecting as the signing-in user failed, with the likely cause of a refused certificate (a broker
    that does not trust it ends the TLS connection, which the client sees as closed or reset)."""
    text = describe_error(error) if isinstance(error, OdradekError) else (
        "no answer from the cluster in time" if isinstance(error, TimeoutError) else str(error))
    if auth == "mtls" and "trust" not in text and ("closed" in text or "reset" in text or "alert" in text.lower()):
        return (f"{text} (the brokers ended the TLS connection: they did not accept this certificate; is it "
                "signed by a CA in their ssl.truststore?)")
    return text


def _local(path: str) -> str:
    """A redirect target after sign-in: a path on this console only (never //host or a scheme)."""
    return path if path.startswith("/") and not path.startswith("//") and "\\" not in path else "/"


def _escape(text: str) -> str:
    from markupsafe import escape

    return str(escape(text))
