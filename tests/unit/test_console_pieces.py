"""The console's pure parts: record rendering and export, the browse request's checks, the metrics parser and
quantile, the cache, and the sign-in and cross-site rules (settings, Origin, redirects)."""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json

import pytest

from odradek.client.admin import AclBinding
from odradek.client.consumer import ConsumerRecord
from odradek.client.errors import ConfigError
from odradek.console.app import _local
from odradek.console.auth import Audit, Sessions, is_loopback, origin_ok
from odradek.console.main import parse_args, settings_from
from odradek.console.reader import TtlCache, who_can
from odradek.console.records import MAX_LIMIT, MAX_SCAN, BrowseError, BrowseRequest, export_csv, export_json, render
from odradek.console.sampler import Sampler, parse_scrape, parse_share_figures, quantile_of_delta


def _record(key, value, headers=(), offset=0) -> ConsumerRecord:
    return ConsumerRecord("t", 0, offset, 1000, 0, key, value, list(headers))


def test_render_formats():
    assert render(None, "auto") == ("null", "null")
    assert render(b'{"a":1}', "auto") == ('{\n  "a": 1\n}', "json")
    assert render(b"plain", "auto") == ("plain", "text")
    assert render(b"\xff\x00", "auto") == ("ff 00", "hex")
    assert render(b'{"a":1}', "text") == ('{"a":1}', "text")
    assert render(b"abc", "hex") == ("61 62 63", "hex")
    assert render(b"not json", "json") == ("not json", "text")
    assert render(b"x" * 5000, "hex")[0].endswith(" …")


def test_export_keeps_bytes_that_are_not_text():
    records = [_record(b"k", b'{"n": 1}', [("h", b"v"), ("bin", b"\xff")]), _record(None, b"\xfe", offset=1)]
    exported = json.loads(export_json(records))
    assert exported[0]["key"] == "k" and json.loads(exported[0]["value"]) == {"n": 1}
    assert exported[0]["headers"] == [["h", "v"], ["bin", {"base64": "/w=="}]]
    assert exported[1]["key"] is None and exported[1]["value"] == {"base64": "/g=="}
    rows = list(csv.reader(io.StringIO(export_csv(records))))
    assert rows[0] == ["topic", "partition", "offset", "timestamp", "key", "value", "headers"]
    assert rows[1][4:6] == ["k", '{"n": 1}'] and rows[2][4:6] == ["", '{"base64": "/g=="}']


@pytest.mark.parametrize("kwargs, message", [
    ({"start": "yesterday"}, "start must be"),
    ({"limit": 0}, "limit must be"),
    ({"limit": MAX_LIMIT + 1}, "limit must be"),
    ({"max_scan": MAX_SCAN + 1}, "scan bound"),
    ({"start": "offset", "offset": -1}, "an offset is 0 or more"),
    ({"partition": -2}, "a partition is 0 or more"),
])
def test_browse_requests_out_of_bounds_are_refused(kwargs, message):
    with pytest.raises(BrowseError, match=message):
        BrowseRequest("t", **kwargs)


SCRAPE_1 = """\
# TYPE odradek_bytes_in_total counter
odradek_bytes_in_total 1000.0
# TYPE odradek_bytes_out_total counter
odradek_bytes_out_total 5000.0
# TYPE odradek_requests_total counter
odradek_requests_total{api="Produce",version="9"} 10.0
odradek_requests_total{api="Fetch",version="13"} 5.0
# TYPE odradek_request_latency_seconds histogram
odradek_request_latency_seconds_bucket{api="Produce",le="0.001"} 5.0
odradek_request_latency_seconds_bucket{api="Produce",le="0.01"} 9.0
odradek_request_latency_seconds_bucket{api="Produce",le="+Inf"} 10.0
odradek_request_latency_seconds_count{api="Produce"} 10.0
odradek_request_latency_seconds_sum{api="Produce"} 0.05
"""


def test_metrics_parse_and_the_quantile_of_an_interval():
    first = parse_scrape(SCRAPE_1, 100.0)
    assert first.counters == {"bytes_in": 1000.0, "bytes_out": 5000.0, "requests": 15.0}
    assert first.buckets["Produce"] == {0.001: 5.0, 0.01: 9.0, float("inf"): 10.0}
    later = {0.001: 5.0, 0.01: 109.0, float("inf"): 110.0}  # 100 more, all but one under 10 ms
    assert quantile_of_delta(first.buckets["Produce"], later, 0.99) == 0.01
    assert quantile_of_delta(later, later, 0.99) is None  # nothing happened in between
    assert quantile_of_delta({}, {0.001: 0.0, float("inf"): 3.0}, 0.5) == 0.001  # all beyond the last bound


def test_the_sampler_keeps_one_lag_point_per_interval():
    sampler = Sampler(None, [], interval_s=5.0)
    sampler.record("g", 10, at=100.0)
    sampler.record("g", 11, at=101.0)  # a second viewer a second later: same interval
    sampler.record("g", 7, at=106.0)
    assert sampler.lag_series("g") == {"t": [100.0, 106.0], "lag": [10, 7]}
    assert sampler.latest_lag() == {"g": 7}


def test_the_cache_loads_once_per_key_and_interval():
    calls = []

    async def run():
        cache = TtlCache(60.0)

        async def load():
            calls.append(1)
            await asyncio.sleep(0.01)
            return len(calls)

        values = await asyncio.gather(*(cache.get(("topics", "alice"), load) for _ in range(5)))
        cache.forget("topics")
        again = await cache.get(("topics", "alice"), load)
        return values, again

    values, again = asyncio.run(run())
    assert values == [1] * 5 and again == 2


def test_who_can_matches_literal_wildcard_and_prefixed_bindings():
    acls = [AclBinding("topic", "orders", "literal", "User:a", "*", "read", "allow"),
            AclBinding("topic", "*", "literal", "User:b", "*", "describe", "allow"),
            AclBinding("topic", "ord", "prefixed", "User:c", "*", "write", "deny"),
            AclBinding("topic", "other", "literal", "User:d", "*", "read", "allow"),
            AclBinding("group", "orders", "literal", "User:e", "*", "read", "allow")]
    found = who_can(acls, "topic", "orders")
    assert [b.principal for b in found] == ["User:c", "User:a", "User:b"]  # a deny first


def test_origin_and_redirect_rules():
    assert origin_ok(None, "127.0.0.1:9080")
    assert origin_ok("http://127.0.0.1:9080", "127.0.0.1:9080")
    assert not origin_ok("http://evil.example", "127.0.0.1:9080")
    assert not origin_ok("null", "127.0.0.1:9080")
    assert _local("/topics/x") == "/topics/x"
    assert _local("//evil.example/") == "/" and _local("https://evil.example") == "/" and _local("/\\evil") == "/"
    assert is_loopback("127.0.0.1") and is_loopback("::1") and not is_loopback("0.0.0.0")


def test_sessions_and_csrf_tokens():
    sessions = Sessions()
    session = sessions.new()
    assert sessions.get(session.token) is session and sessions.get("forged") is None
    assert session.csrf_ok(session.csrf) and not session.csrf_ok("x") and not session.csrf_ok(None)
    assert session.csrf != session.token
    sessions.drop(session)
    assert sessions.get(session.token) is None


def test_audit_logs_each_change_once(caplog):
    audit = Audit()
    with caplog.at_level("INFO", logger="odradek.console.audit"):
        audit.record("User:alice", "group.delete", "g1", "ok")
    assert [r.getMessage() for r in caplog.records] == [
        "audit principal=User:alice action=group.delete target='g1' outcome=ok"]
    assert audit.entries[0].principal == "User:alice"


def _settings(*argv: str):
    return settings_from(parse_args(list(argv)))


def test_sign_in_follows_the_clusters_security():
    plain = _settings("-b", "h:9092")
    assert not plain.signin_required and plain.config.security_protocol == "PLAINTEXT"
    sasl = _settings("-b", "h:9093", "-X", "security.protocol=SASL_SSL")
    assert sasl.signin_required and sasl.config.sasl_mechanism == "SCRAM-SHA-512" and not sasl.own_credentials
    own = _settings("-b", "h:9093", "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-256",
                    "-X", "sasl.username=console", "-X", "sasl.password=pw", "--read-only")
    assert own.own_credentials and own.read_only and own.config.sasl_mechanism == "SCRAM-SHA-256"


def test_a_console_without_sign_in_refuses_to_listen_beyond_loopback():
    with pytest.raises(ConfigError, match="loopback"):
        _settings("-b", "h:9092", "--host", "0.0.0.0")
    assert not _settings("-b", "h:9092", "--host", "0.0.0.0", "--allow-anonymous-remote").signin_required
    assert _settings("-b", "h:9092", "--host", "0.0.0.0", "-X", "security.protocol=SASL_SSL",
                     "--allow-plain-http").signin_required
    with pytest.raises(SystemExit):
        parse_args(["-X", "no-equals-sign"])
    assert isinstance(parse_args([]), argparse.Namespace)


def test_mtls_sign_in_is_asked_for_and_needs_an_ssl_listener():
    ssl = ("-b", "h:9094", "-X", "security.protocol=SSL")
    assert _settings(*ssl).auth == "none" and not _settings(*ssl).signin_required  # not automatic on SSL
    mtls = _settings(*ssl, "--auth", "mtls")
    assert mtls.auth == "mtls" and mtls.signin_required and not mtls.own_credentials
    assert _settings(*ssl, "--auth", "mtls", "-X", "ssl.certificate.location=c.pem", "-X",
                     "ssl.key.location=k.pem").own_credentials  # the console's own certificate: its sampler
    for protocol in ("PLAINTEXT", "SASL_SSL"):
        with pytest.raises(ConfigError, match="an SSL listener"):
            _settings("-b", "h:9094", "-X", f"security.protocol={protocol}", "--auth", "mtls")
    with pytest.raises(ConfigError, match="private keys in clear"):
        _settings(*ssl, "--auth", "mtls", "--host", "0.0.0.0")
    with pytest.raises(ConfigError, match="needs a SASL listener"):
        _settings(*ssl, "--auth", "sasl")
    with pytest.raises(ConfigError, match="own principal"):
        _settings("-b", "h:9093", "-X", "security.protocol=SASL_SSL", "--auth", "none")
    assert _settings("-b", "h:9093", "-X", "security.protocol=SASL_SSL").auth == "sasl"


def test_pem_credentials_are_never_in_a_configs_repr():
    from odradek.client.config import ClientConfig

    config = ClientConfig(bootstrap_servers="h:1", security_protocol="SSL", ssl_certificate_pem="CERT-TEXT",
                          ssl_key_pem="KEY-TEXT", ssl_key_password="PW")
    assert "KEY-TEXT" not in repr(config) and "CERT-TEXT" not in repr(config) and "PW" not in repr(config)
    with pytest.raises(ConfigError, match="go together"):
        ClientConfig(bootstrap_servers="h:1", ssl_certificate_pem="CERT-TEXT")
    with pytest.raises(ConfigError, match="set one"):
        ClientConfig(bootstrap_servers="h:1", ssl_certificate_pem="C", ssl_key_pem="K", ssl_certificate_location="c")


def test_sessions_are_capped():
    from odradek.console.auth import MAX_SESSIONS

    sessions = Sessions()
    first = sessions.new()
    for _ in range(MAX_SESSIONS + 10):
        sessions.new()
    assert sessions.get(first.token) is None
    assert len(sessions._by_token) == MAX_SESSIONS


def test_client_properties_are_typed_and_checked():
    settings = _settings("-b", "h:9092", "-X", "request.timeout.ms=5000", "-X", "ssl.endpoint.identification.algorithm=none")
    assert settings.config.request_timeout_ms == 5000
    assert settings.config.default_api_timeout_ms == 15_000  # the console's own bound on a page's wait
    with pytest.raises(ConfigError, match="unknown client property 'linger.ms'"):
        _settings("-b", "h:9092", "-X", "linger.ms=5")
    with pytest.raises(ConfigError, match="whole number"):
        _settings("-b", "h:9092", "-X", "request.timeout.ms=soon")


def test_sign_in_beyond_loopback_needs_https(tmp_path):
    sasl = ("-b", "h:9093", "-X", "security.protocol=SASL_SSL")
    with pytest.raises(ConfigError, match="passwords in clear"):
        _settings(*sasl, "--host", "0.0.0.0")
    assert _settings(*sasl, "--host", "0.0.0.0", "--allow-plain-http").signin_required
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("x")
    key.write_text("x")
    settings = _settings(*sasl, "--host", "0.0.0.0", "--certfile", str(cert), "--keyfile", str(key))
    assert settings.certfile == str(cert)
    with pytest.raises(ConfigError, match="go together"):
        _settings(*sasl, "--certfile", str(cert))
    with pytest.raises(ConfigError, match="no such file"):
        _settings(*sasl, "--certfile", str(tmp_path / "nope"), "--keyfile", str(key))


SHARE_SCRAPE = """# TYPE odradek_share_partitions gauge
odradek_share_partitions 3.0
# TYPE odradek_share_records_in_flight gauge
odradek_share_records_in_flight 7.0
# TYPE odradek_share_lock_expiries counter
odradek_share_lock_expiries_total 2.0
# TYPE odradek_share_partition_records_in_flight gauge
odradek_share_partition_records_in_flight{group="g",topic="t",partition="0"} 5.0
odradek_share_partition_records_in_flight{group="h",topic="t",partition="1"} 2.0
# TYPE odradek_share_partition_records_acquired gauge
odradek_share_partition_records_acquired{group="g",topic="t",partition="0"} 4.0
"""


def test_share_figures_are_read_per_share_partition_and_summed_over_brokers():
    figures = parse_share_figures([SHARE_SCRAPE, "odradek_share_records_in_flight 1\n"])
    assert figures.scraped == 2 and figures.totals["in_flight"] == 8.0 and figures.totals["lock_expiries"] == 2.0
    assert figures.of_group("g") == {"t-0": {"in_flight": 5.0, "acquired": 4.0}}
    assert figures.labelled == 2 < figures.totals["share_partitions"]  # one share-partition is not labelled
