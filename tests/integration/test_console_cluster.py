"""The console against a three-node cluster (`odradek cluster up`, PLAINTEXT, the StandardAuthorizer on with
User:ANONYMOUS as the super user): one cluster, one console process, one browser for the whole module.

First the tour: the test creates something for every page and checks the page shows it, as a user would
find it on a real cluster, where each answer may come from another broker (a partition's leader, a group's
or a transaction's coordinator, each broker's /metrics):
- the cluster page: three brokers alive, the quorum with its three voters and their leader;
- the topics list and the page of an RF=3 topic: each partition's leader, replicas and ISR as the brokers'
  metadata has them, its high watermark, and the config the test set (not a default);
- the records page: a browse from the beginning with a filter on a header finds exactly the records the
  test produced with it;
- the groups list and a classic group's page: the offsets the group committed and its lag per partition;
- a share group's page while a confluent-kafka ShareConsumer holds records: in flight and acquired on the
  share-partition's row, and acquired on the member's own row (from the partition leader's labelled gauges);
  and its lag, exact whichever broker leads the partition (the group's coordinator asks the leader);
- the transactions page: an open transaction of confluent-kafka's transactional producer, with its
  partition, until the producer commits it; then the last stable offset reaches the high watermark;
- the security page: the ACL the test created, under its principal and in "who can do what here".

Then the damage: when a broker is killed (-9) the banner on every page names the partitions left
under-replicated and under their min ISR, and clears again once the broker is back; the broker is shown
fenced meanwhile, and the ISR timeline has the shrink and the expand: the exact one the brokers keep from the
metadata log (/odradek/isr-events next to their /metrics), with every partition, its ISR before and after and its
replicas. The cluster page shows the newest 50 ISR changes, so the internal topics run with few partitions here
(Kafka's 50 each would push the `replicated` topic's changes off the page).

Screenshots of every page in test-artifacts/console/ (`cluster3-*` for the tour)."""

from __future__ import annotations

import json
import os
import signal
from typing import Any, Callable
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic, \
    ResourcePatternType, ResourceType


from tests.harness.console import ConsoleProcess, browser_or_skip, open_page, screenshot, table_rows
from tests.harness.processes import Cluster, free_metrics_prefix, odradek

pytestmark = pytest.mark.timeout(300)

ORDERS, PER_PARTITION, COMMITTED, RETENTION_MS = "orders", 30, 20, "3600000"
SHARE_TOPIC, SHARE_GROUP, SHARE_RECORDS = "jobs", "workers", 5
TXN_TOPIC, TXN_ID = "payments", "checkout-3"
OVERRIDES = [
    "metrics.host=127.0.0.1",
    "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer", "super.users=User:ANONYMOUS",
    # few internal partitions: every ISR change of the kill below stays within the page's newest 50
    "offsets.topic.num.partitions=3", "transaction.state.log.num.partitions=1",
    "share.coordinator.state.topic.num.partitions=1",
    # a share lock longer than the tour holds records (Kafka's bounds: 15 s <= lock <= 60 s), and a 1 s
    # heartbeat so the share member gets its assignment at once
    "group.share.record.lock.duration.ms=60000", "group.share.min.heartbeat.interval.ms=1000",
    "group.share.heartbeat.interval.ms=1000"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    prefix = free_metrics_prefix(3)  # the console finds each broker's /metrics (and ISR timeline) through its configs
    c = Cluster(tmp_path_factory.mktemp("console-cluster") / "cluster",
                overrides=[f"metrics.port={prefix}{{node}}", *OVERRIDES])
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


def _until(c: Cluster, what: str, probe: Callable[[], tuple[Any, object]], timeout_s: float = 60.0) -> Any:
    """`c.wait` for the first value of `probe()` (a pair: the value or a falsy one, and what the page showed);
    a timeout names what the page showed last, so a failure says which part of the page was not there yet."""
    last: list[object] = [None]

    def check() -> Any:
        value, last[0] = probe()
        return value
    try:
        return c.wait(check, what, timeout_s)
    except AssertionError as e:
        raise AssertionError(f"{what}: the page showed last {last[0]!r}\n{e}") from None


def _create_what_the_pages_show(c: Cluster) -> None:
    """Topics, records with and without a header, a classic group's committed offsets and an ACL."""
    bootstrap = c.bootstrap(1)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(ORDERS, 3, 3, config={"retention.ms": RETENTION_MS}),
                                       NewTopic(SHARE_TOPIC, 1, 3), NewTopic(TXN_TOPIC, 1, 3)],
                                      request_timeout=20).values():
        future.result(30)
    for future in admin.create_acls([AclBinding(ResourceType.TOPIC, ORDERS, ResourcePatternType.LITERAL,
                                                "User:alice", "*", AclOperation.READ,
                                                AclPermissionType.ALLOW)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})  # acks=all: in every ISR replica
    for p in range(3):
        for i in range(PER_PARTITION):
            producer.produce(ORDERS, key=f"o{p}-{i}".encode(), value=json.dumps({"n": i}).encode(), partition=p,
                             headers=[("src", b"tour")] if i % 10 == 0 else None)
    for i in range(SHARE_RECORDS):
        producer.produce(SHARE_TOPIC, f"job-{i}".encode())
    assert producer.flush(30) == 0
    # the classic group `billing` reads everything, commits COMMITTED of each partition and leaves: Empty, with
    # a lag of PER_PARTITION - COMMITTED per partition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe([ORDERS])
        seen = 0

        def read_all() -> bool:
            nonlocal seen
            seen += sum(1 for m in consumer.consume(100, 0.5) if not m.error())
            return seen == 3 * PER_PARTITION
        c.wait(read_all, "the billing group to read every record", 60)
        consumer.commit(offsets=[TopicPartition(ORDERS, p, COMMITTED) for p in range(3)], asynchronous=False)
    finally:
        consumer.close()


def test_every_page_shows_what_the_test_created_on_three_nodes(cluster, browser):
    c, console = cluster
    url, bootstrap = console.url, c.bootstrap(1)
    _create_what_the_pages_show(c)
    # an open transaction on `payments`, committed at the end of the tour
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID, "transaction.timeout.ms": 300_000})
    txn.init_transactions(60)
    txn.begin_transaction()
    txn.produce(TXN_TOPIC, b"pending")
    assert txn.flush(30) == 0
    # a share consumer holding records (explicit acknowledgement: nothing is acknowledged while it holds them)
    configured = odradek("-b", bootstrap, "config", "set", "group", SHARE_GROUP, "share.auto.offset.reset=earliest")
    assert configured.returncode == 0, configured.stderr
    share = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": SHARE_GROUP, "client.id": "share-worker",
                           "share.acknowledgement.mode": "explicit"})
    page = browser.new_page(viewport={"width": 1280, "height": 860})
    page.set_default_timeout(30_000)
    try:
        share.subscribe([SHARE_TOPIC])
        held = c.wait(lambda: [m for m in share.poll(1.0) if m.error() is None], "records acquired", 60)
        assert sorted(m.value() for m in held) == [f"job-{i}".encode() for i in range(len(held))]

        # share group: in flight and acquired on the share-partition's row (its leader's gauges, whichever
        # broker leads it) and acquired on the member's row, while the consumer holds the records
        def holding() -> tuple[list[list[str]] | None, object]:
            open_page(page, url + f"/share-groups/{SHARE_GROUP}", "#share-partitions")
            members = table_rows(page, "#members")[1:]
            if len(members) != 1 or "share-worker" not in members[0] or page.locator("#in-flight").count() != 1:
                return None, members
            row = page.locator(f'#share-partitions tr[data-tp="{SHARE_TOPIC}-0"]')
            figures = [row.locator(f"[data-{key}]").inner_text() for key in ("in-flight", "acquired", "lag")]
            acquired = page.locator("#members tr[data-member] [data-acquired]").inner_text()
            return members if figures[:2] == [str(len(held))] * 2 and figures[2] in lags and \
                acquired == str(len(held)) else None, (members, table_rows(page, "#share-partitions"), len(held))

        # The lag comes from DescribeShareGroupOffsets, answered by the group's coordinator, which asks the
        # partition's leader for its end offset when it does not lead it (KIP-1226): exact wherever either is.
        lags = {str(len(held))}
        (member,) = _until(c, "the member and its held records on the share-group page", holding)
        assert f"{SHARE_TOPIC}-0" in member[5]  # its assignment
        assert int(page.locator("#acquired").inner_text()) >= len(held) > 0
        screenshot(page, "cluster3-share-group")

        # cluster: three brokers alive, three voters, a leader among them
        open_page(page, url + "/", "#brokers")
        brokers = table_rows(page, "#brokers")[1:]
        assert sorted(int(b[0].split()[0]) for b in brokers) == [1, 2, 3] and all(b[3] == "alive" for b in brokers)
        voters = table_rows(page, "#quorum")[1:]
        assert sorted(int(v[0]) for v in voters) == [1, 2, 3] and all(v[1].startswith("voter") for v in voters)
        assert [v[0] for v in voters if v[1] == "voter (leader)"] == [page.locator("#quorum-leader").inner_text()]
        screenshot(page, "cluster3-cluster")

        # topics: the RF=3 topic, and the group reading it with its lag (once the console sampled it)
        def listed() -> tuple[list[str] | None, object]:
            open_page(page, url + "/topics", "#topics")
            row = {r[0]: r for r in table_rows(page, "#topics")[1:]}.get(ORDERS)
            return (row if row is not None and f"billing ({3 * (PER_PARTITION - COMMITTED)})" in row[8] else None), row
        orders = _until(c, "the orders topic with the billing group's lag", listed)
        assert orders[1:3] == ["3", "3"]  # partitions, replication
        screenshot(page, "cluster3-topics")

        # the topic: each partition's leader, replicas and ISR as the brokers' metadata has them, and its config
        def partitions_as_the_brokers_say() -> tuple[list[list[str]] | None, object]:
            metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(ORDERS, timeout=20).topics[ORDERS]
            open_page(page, url + f"/topics/{ORDERS}", "#partitions")
            rows = table_rows(page, "#partitions")[1:]
            expected = [[str(p), str(m.leader), {str(r) for r in m.replicas}, {str(r) for r in m.isrs}]
                        for p, m in sorted(metadata.partitions.items())]
            shown = [[r[0], r[1], set(r[3].split(", ")), set(r[4].split(", "))] for r in rows]
            return (rows if shown == expected and all(r[7] == str(PER_PARTITION) for r in rows) else None), \
                (rows, expected)
        rows = _until(c, "the topic page to match the brokers' metadata", partitions_as_the_brokers_say)
        for r in rows:
            assert set(r[3].split(", ")) == set(r[4].split(", ")) == {"1", "2", "3"} and r[5] == "ok", r
        assert {r[1] for r in rows} <= {"1", "2", "3"}
        configs = {r[0]: r for r in table_rows(page, "#configs")[1:]}
        assert configs["retention.ms"][1] == RETENTION_MS and configs["retention.ms"][2] != "default"
        assert configs["cleanup.policy"][1:] == ["delete", "default"]
        screenshot(page, "cluster3-topic")

        # records: a browse from the beginning filtered on the header finds exactly the records produced with it
        open_page(page, url + f"/topics/{ORDERS}/records", "#browse")
        page.select_option("select[name=start]", "earliest")
        page.fill("input[name=filter]", 'headers.src == "tour"')
        page.click("#browse-go")
        page.wait_for_selector("#browse-summary")
        summary = page.locator("#browse-summary")
        assert (summary.get_attribute("data-stopped"), summary.get_attribute("data-scanned")) == \
            ("end", str(3 * PER_PARTITION))
        found = table_rows(page, "#records")[1:]
        assert sorted(r[3] for r in found) == sorted(f"o{p}-{i}" for p in range(3) for i in (0, 10, 20))
        assert all(r[5] == "src: tour" and json.loads(r[4])["n"] % 10 == 0 for r in found), found
        screenshot(page, "cluster3-records")

        # groups: the classic group with its committed offsets and lag, the share group beside it
        def groups_listed() -> tuple[dict[str, list[str]] | None, object]:
            open_page(page, url + "/groups", "#groups")
            rows = {r[0]: r for r in table_rows(page, "#groups")[1:]}
            return (rows if {"billing", SHARE_GROUP} <= set(rows) else None), rows
        groups = _until(c, "both groups listed", groups_listed)
        assert groups["billing"][1] == "classic" and groups[SHARE_GROUP][1] == "share"
        screenshot(page, "cluster3-groups")
        open_page(page, url + "/groups/billing", "#lag")
        lag = {r[0]: r[1:4] for r in table_rows(page, "#lag")[1:]}
        assert lag == {f"{ORDERS}-{p}": [str(COMMITTED), str(PER_PARTITION), str(PER_PARTITION - COMMITTED)]
                       for p in range(3)}
        assert page.locator("#total-lag").inner_text() == str(3 * (PER_PARTITION - COMMITTED))
        screenshot(page, "cluster3-group")

        # transactions: the open one, with its partition and coordinator; its data is past the last stable offset
        def transaction(state: str) -> tuple[list[str] | None, object]:
            open_page(page, url + "/transactions", "#transactions")
            row = {r[0]: r for r in table_rows(page, "#transactions")[1:]}.get(TXN_ID)
            return (row if row is not None and row[4] == state else None), row
        row = _until(c, "the open transaction on the transactions page", lambda: transaction("Ongoing"))
        assert row[7].split() == [f"{TXN_TOPIC}-0", "abort", "here"], row  # its partition, and an abort for it
        assert row[1] in ("1", "2", "3")  # its coordinator, whichever broker that is
        screenshot(page, "cluster3-transactions")

        def offsets(hw: str, lso: str) -> tuple[bool, object]:
            open_page(page, url + f"/topics/{TXN_TOPIC}", "#partitions")
            shown = table_rows(page, "#partitions")[1][7:9]  # high watermark, last stable offset
            return shown == [hw, lso], shown
        _until(c, "the last stable offset held at the open transaction", lambda: offsets("1", "0"))
        txn.commit_transaction(60)
        _until(c, "the transaction shown committed", lambda: transaction("CompleteCommit"))
        _until(c, "the last stable offset past the commit marker", lambda: offsets("2", "2"))

        # security: the ACL the test created, by principal and in "who can do what here"
        open_page(page, url + f"/security?resource_type=topic&resource_name={ORDERS}", "#acls")
        acls = table_rows(page, "#acls")[1:]
        assert ["User:alice", f"topic:literal:{ORDERS}", "*", "read", "allow"] in [a[:5] for a in acls], acls
        assert [["User:alice", "*", "read", "allow", f"literal {ORDERS}"]] == table_rows(page, "#who-can")[1:]
        screenshot(page, "cluster3-security")
    finally:
        page.close()
        share.close()  # the held records go back (the kill below finds no member)
        txn.flush(10)


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
