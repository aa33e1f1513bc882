"""The console against a three-node cluster (`odradek cluster up`): the cluster page lists the three brokers and
the three voters of the quorum, and when a broker is killed (-9) the banner on every page names the partitions
left under-replicated and under their min ISR, and clears again once the broker is back; the broker is shown
fenced meanwhile, and the ISR timeline has the shrink and the expand: the exact one the brokers keep from the
metadata log (/odradek/isr-events next to their /metrics), with every partition, its ISR before and after and its
replicas. Screenshots in test-artifacts/console/."""

from __future__ import annotations

import json
import os
import signal
import urllib.error
import urllib.request

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness.console import ConsoleProcess, browser_or_skip, screenshot
from tests.harness.processes import Cluster, free_metrics_prefix

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    prefix = free_metrics_prefix(3)  # the console finds each broker's /metrics (and ISR timeline) through its configs
    c = Cluster(tmp_path_factory.mktemp("console-cluster") / "cluster",
                overrides=[f"metrics.port={prefix}{{node}}", "metrics.host=127.0.0.1"])
    c.metrics_port = lambda node_id: prefix * 10 + node_id  # type: ignore[attr-defined]
    c.up()
    console = None
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap(1)})
        for future in admin.create_topics([NewTopic("replicated", 3, 3, config={"min.insync.replicas": "3"})],
                                          request_timeout=20).values():
            future.result(30)
        console = ConsoleProcess(c.bootstrap(1)).start()
        yield c, console
    finally:
        if console is not None:
            console.stop()
        c.down()


@pytest.fixture(scope="module")
def browser():
    playwright, browser = browser_or_skip()
    yield browser
    browser.close()
    playwright.stop()


def _health(page) -> set[str]:
    page.reload()
    page.wait_for_selector("#banner [data-health]")
    return {e.get_attribute("data-health") for e in page.locator("#banner [data-health]").all()}


def test_three_brokers_the_quorum_and_a_banner_that_follows_a_dead_broker(cluster, browser):
    c, console = cluster
    page = browser.new_page(viewport={"width": 1280, "height": 860})
    page.set_default_timeout(30_000)
    page.goto(console.url + "/")
    page.wait_for_selector("#brokers")
    assert page.locator("#brokers tr").count() == 4
    assert page.locator("#quorum tr").count() == 4  # header and three voters
    c.wait(lambda: _health(page) == {"ok"}, "a healthy banner")
    screenshot(page, "cluster-3-nodes")

    os.kill(c.pid(3), signal.SIGKILL)
    c.wait(lambda: {"under-replicated", "under-min-isr"} <= _health(page), "the banner to name the damage", 60)
    text = page.locator("#banner").inner_text()
    assert "replicated-0" in text and "under min ISR" in text
    def fenced() -> bool:
        page.reload()
        return "fenced" in page.locator("#brokers").inner_text()
    c.wait(fenced, "broker 3 shown fenced", 60)
    page.goto(console.url + "/topics/replicated")
    page.wait_for_selector("#partitions")
    assert "under-replicated" in page.locator("#partitions").inner_text()
    screenshot(page, "cluster-broker-down")

    def timeline(kind: str) -> dict[str, tuple[str, str]]:
        """partition -> (ISR before, ISR after) of the page's `kind` rows, from the exact timeline."""
        page.goto(console.url + "/")
        page.wait_for_selector("#isr-events")
        assert page.locator("#isr-events").get_attribute("data-source") == "metadata-log"
        return {row.get_attribute("data-partition"): (row.get_attribute("data-isr-before"), row.get_attribute("data-isr-after"))
                for row in page.locator(f"#isr-events tr[data-kind='{kind}']").all()}
    everyone = {f"replicated-{p}" for p in range(3)}
    shrinks = c.wait(lambda: (found := timeline("shrink")) and everyone <= set(found) and found, "the shrinks on the page", 60)
    for p in everyone:  # broker 3 left every partition's ISR (in whatever order the ISR lists them)
        before, after = shrinks[p]
        assert set(before.split(",")) == {"1", "2", "3"} and set(after.split(",")) == {"1", "2"}

    c.up()  # restarts the node that died, on its own ports and data
    page.goto(console.url + "/")
    c.wait(lambda: _health(page) == {"ok"}, "the banner to clear once the broker is back", 90)
    expands = c.wait(lambda: (found := timeline("expand")) and everyone <= set(found) and found, "the expands on the page", 60)
    for p in everyone:
        before, after = expands[p]
        assert set(before.split(",")) == {"1", "2"} and set(after.split(",")) == {"1", "2", "3"}
    screenshot(page, "cluster-isr-timeline")
    page.close()

    # What the page showed is what the brokers serve: node 1's ring, oldest first, by metadata offset, each event
    # with its replicas; the shrink of each partition comes before its expand.
    with urllib.request.urlopen(f"http://127.0.0.1:{c.metrics_port(1)}/odradek/isr-events", timeout=10) as response:
        answer = json.loads(response.read())
    assert answer["node_id"] == 1 and answer["capacity"] == 1000
    events = [e for e in answer["events"] if e["topic"] == "replicated"]
    offsets = [e["offset"] for e in answer["events"]]
    assert offsets == sorted(offsets)
    for p in range(3):
        mine = [e for e in events if e["partition"] == p and e["kind"] in ("shrink", "expand")]
        assert [e["kind"] for e in mine][-2:] == ["shrink", "expand"], mine
        assert all(sorted(e["replicas"]) == [1, 2, 3] for e in mine)
        assert 3 in mine[-2]["isr_before"] and 3 not in mine[-2]["isr"] and 3 in mine[-1]["isr"]
    with pytest.raises(urllib.error.HTTPError) as refused:  # bounded, and says why
        urllib.request.urlopen(f"http://127.0.0.1:{c.metrics_port(1)}/odradek/isr-events?limit=5000", timeout=10)
    assert refused.value.code == 400
