"""The console against a three-node cluster (`odradek cluster up`): the cluster page lists the three brokers and
the three voters of the quorum, and when a broker is killed (-9) the banner on every page names the partitions
left under-replicated and under their min ISR, and clears again once the broker is back; the broker is shown
fenced meanwhile, and the ISR timeline has the shrink and the expand. Screenshots in test-artifacts/console/."""

from __future__ import annotations

import os
import signal

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness.console import ConsoleProcess, browser_or_skip, screenshot
from tests.harness.processes import Cluster

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("console-cluster") / "cluster")
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

    def timeline(kind: str) -> bool:
        page.goto(console.url + "/")
        page.wait_for_selector("#isr-events")
        return any(kind in row and "replicated-0" in row for row in page.locator("#isr-events tr").all_inner_texts())
    c.wait(lambda: timeline("shrink"), "the shrink in the ISR timeline", 60)

    c.up()  # restarts the node that died, on its own ports and data
    page.goto(console.url + "/")
    c.wait(lambda: _health(page) == {"ok"}, "the banner to clear once the broker is back", 90)
    c.wait(lambda: timeline("expand"), "the expand in the ISR timeline", 60)
    screenshot(page, "cluster-isr-timeline")
    page.close()
