"""Per-user mTLS sign-in to the web console, in a real headless browser against a real broker.

One broker with two listeners: PLAINTEXT (User:ANONYMOUS, a super user, for the setup) and SSL requiring
client certificates, `ssl.principal.mapping.rules` mapping CN=<name>,... to <name>, StandardAuthorizer. The
console runs `--auth mtls` against the SSL listener with no certificate of its own. alice may read and
describe `ledger`; bob may describe and read it too, but not write; neither may see `vault`.

- alice signs in with her certificate and key (PEM files chosen on the sign-in page): the topics page shows
  `ledger` and not `vault`, and the header names her certificate's subject;
- bob signs in with his (his key encrypted, with its password) and is refused a produce with the brokers'
  TOPIC_AUTHORIZATION_FAILED; the audit names him;
- alice's certificate with bob's key, bob's key without its password, and a certificate from a CA the
  broker does not trust are refused at sign-in, each with its cause;
- no private key reaches the console's output.
"""

from __future__ import annotations

import subprocess
import time

import pytest
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic, \
    ResourcePatternType, ResourceType

from tests.brokerproc import _LISTENING, BrokerProcess
from tests.harness.console import ConsoleProcess, browser_or_skip, screenshot
from tests.pki import make_pki

pytestmark = pytest.mark.timeout(240)

BOB_KEY_PASSWORD = "bob-key-pw"


def _wait(predicate, what: str, timeout_s: float = 40.0):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _allow(rtype, name, user, op) -> AclBinding:
    return AclBinding(rtype, name, ResourcePatternType.LITERAL, f"User:{user}", "*", op, AclPermissionType.ALLOW)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("console-mtls")
    pki = make_pki(base / "pki")
    alice, bob = pki.client("alice"), pki.client("bob")
    encrypted = base / "pki" / "bob-encrypted.key"
    subprocess.run(["openssl", "pkcs8", "-topk8", "-in", str(bob[1]), "-out", str(encrypted), "-passout",
                    f"pass:{BOB_KEY_PASSWORD}"], check=True, capture_output=True)
    broker = BrokerProcess(
        base / "data", "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={pki.server_store}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={pki.ca}", "ssl.client.auth=required",
        "ssl.principal.mapping.rules=RULE:^CN=([^,]+),.*$/$1/,DEFAULT",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:ANONYMOUS", "num.partitions=1", "offsets.topic.replication.factor=1").start()
    console = None
    try:
        ports = _wait(lambda: (found := {m.group(1): int(m.group(3)) for line in list(broker.output)
                                         if (m := _LISTENING.search(line))}) and len(found) == 2 and found,
                      "both listeners", 30)
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"})
        for future in admin.create_topics([NewTopic("ledger", 1, 1), NewTopic("vault", 1, 1)]).values():
            future.result(30)
        for future in admin.create_acls([
                _allow(ResourceType.TOPIC, "ledger", "alice", AclOperation.READ),
                _allow(ResourceType.TOPIC, "ledger", "alice", AclOperation.DESCRIBE),
                _allow(ResourceType.TOPIC, "ledger", "bob", AclOperation.READ),
                _allow(ResourceType.TOPIC, "ledger", "bob", AclOperation.DESCRIBE)]).values():
            future.result(30)
        console = ConsoleProcess(f"127.0.0.1:{ports['SSL']}", "-X", "security.protocol=SSL",
                                 "-X", f"ssl.ca.location={pki.ca}", "--auth", "mtls").start()
        playwright, browser = browser_or_skip()
        try:
            yield {"console": console, "browser": browser, "alice": alice, "bob": (bob[0], encrypted),
                   "bob_plain_key": bob[1], "rogue": pki.rogue_client}
        finally:
            browser.close()
            playwright.stop()
    finally:
        if console is not None:
            console.stop()
        broker.stop()


@pytest.fixture
def page(world):
    context = world["browser"].new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    context.close()


def _sign_in(page, url: str, cert, key, password: str = "") -> None:
    page.goto(url + "/topics")
    page.wait_for_selector("#login")
    page.set_input_files("input[name=certificate]", str(cert))
    page.set_input_files("input[name=private_key]", str(key))
    if password:
        page.fill("input[name=key_password]", password)
    page.click("#login-go")
    page.wait_for_selector("#topics, #login-error")


def test_a_user_signs_in_with_their_certificate_and_sees_their_topics(world, page):
    url = world["console"].url
    cert, key = world["alice"]
    _sign_in(page, url, cert, key)
    assert page.locator("#login-error").count() == 0
    assert page.locator('#topics tr[data-topic="ledger"]').count() == 1
    assert page.locator('#topics tr[data-topic="vault"]').count() == 0
    assert "mTLS CN=alice,OU=test,O=Odradek" in page.locator("header").inner_text()
    screenshot(page, "signed-in-mtls")
    # the records of her topic are hers to read
    page.goto(url + "/topics/ledger/records?go=1&start=earliest")
    page.wait_for_selector("#browse-summary")
    assert page.locator("#page-error").count() == 0


def test_another_certificate_is_refused_a_change_by_the_clusters_acls(world, page):
    url = world["console"].url
    cert, key = world["bob"]
    _sign_in(page, url, cert, key, BOB_KEY_PASSWORD)
    assert page.locator('#topics tr[data-topic="ledger"]').count() == 1
    page.goto(url + "/topics/ledger/records")
    page.wait_for_selector("#produce")
    page.fill("#produce textarea[name=value]", "bob may not write")
    page.click("#produce-go")
    page.wait_for_selector("[data-flash]")
    assert "TOPIC_AUTHORIZATION_FAILED" in page.locator("[data-flash=error]").inner_text()
    page.goto(url + "/audit")
    page.wait_for_selector("#audit")
    audit = page.locator("#audit").inner_text()
    assert "mTLS CN=bob,OU=test,O=Odradek" in audit and "record.produce" in audit
    # sign out: the session (and bob's key with it) is gone; the next page asks to sign in again
    page.click("header button.link")
    page.wait_for_selector("#login")
    page.goto(url + "/topics")
    page.wait_for_selector("#login")


@pytest.mark.parametrize("case", ["wrong key", "no key password", "untrusted CA"])
def test_a_certificate_that_cannot_sign_in_is_refused_with_its_cause(world, page, case):
    url = world["console"].url
    if case == "wrong key":
        _sign_in(page, url, world["alice"][0], world["bob_plain_key"])
        expected = "not the certificate's"
    elif case == "no key password":
        _sign_in(page, url, *world["bob"])
        expected = "wrong or missing key password"
    else:
        _sign_in(page, url, *world["rogue"])
        expected = "not trust this client's certificate"
    error = page.locator("#login-error").inner_text()
    assert "sign-in refused" in error or expected in error
    assert expected in error, error
    assert page.locator("#topics").count() == 0


def test_no_private_key_reaches_the_console_output(world):
    output = world["console"].log_text()
    for path in (world["alice"][1], world["bob"][1], world["bob_plain_key"], world["rogue"][1]):
        body = "".join(path.read_text().strip().splitlines()[1:-1])
        assert body[:40] not in output.replace("\n", "")
    assert "audit principal=mTLS CN=alice,OU=test,O=Odradek action=sign-in" in output
