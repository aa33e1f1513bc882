"""A client that asks for an API the broker does not serve: the connection closes, as Kafka closes it for
an unknown key, and the broker's log says which API, once per client id."""

from __future__ import annotations

import time

from odradek.broker.handlers import SHARE, load_handlers
from odradek.broker.testing import RawClient
from odradek.protocol.messages import REQUESTS

ApiVersionsRequest = REQUESTS[18]
UpdateFeaturesRequest = REQUESTS[57]


def _ask(bootstrap: str, client_id: str) -> None:
    with RawClient(bootstrap, client_id=client_id) as client:
        client.send(UpdateFeaturesRequest(), 1)
        assert client.closed_by_peer()


def test_the_broker_names_an_unserved_api_once_per_client(broker):
    with RawClient(broker.bootstrap) as client:
        listed = {k.api_key for k in client.request(ApiVersionsRequest(), 3).api_keys}
    # (the share-group APIs are behind the odradek.share.enabled gate, on by default)
    assert listed == set(load_handlers(gates=frozenset({SHARE}))) and 57 not in listed
    _ask(broker.bootstrap, "acl-tool")
    _ask(broker.bootstrap, "acl-tool")  # a new connection, the same client: not logged again
    _ask(broker.bootstrap, "other-tool")
    deadline = time.monotonic() + 10
    while sum("closing connection after a protocol error" in line for line in broker.output) < 3:
        assert time.monotonic() < deadline, "".join(broker.output[-20:])
        time.sleep(0.05)
    warnings = [line for line in broker.output if "does not serve" in line]
    assert len(warnings) == 2, warnings
    assert all("UpdateFeatures" in line for line in warnings)
    assert "acl-tool" in warnings[0] and "other-tool" in warnings[1]
