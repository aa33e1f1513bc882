"""APIs the broker does not serve: ApiVersions never lists them, and a request for one is refused with an
error that names the API and the client.

Kafka closes the connection on an api key it does not know (SocketServer: the request header cannot be
parsed), and so does Odradek for every key it has no handler for; UnsupportedApiError carries what the
broker needs to log it once per client (broker/network.py).
"""

from __future__ import annotations

import pytest

from odradek.broker.handlers import accepted_versions, advertised_versions, load_handlers
from odradek.broker.handlers.api_versions import build_response
from odradek.protocol.connection import ClientConnection, ServerConnection, api_name
from odradek.protocol.errors import UnsupportedApiError
from odradek.protocol.messages import REQUESTS

UpdateFeaturesRequest = REQUESTS[57]


def test_api_versions_lists_exactly_the_registered_handlers():
    registry = load_handlers()
    table = advertised_versions(registry)
    listed = {k.api_key: (k.min_version, k.max_version) for k in build_response(table).api_keys}
    assert listed == {k: (r.advertised_min, r.max_version) for k, r in registry.items()}
    unserved = set(REQUESTS) - set(registry)
    assert unserved and not unserved & set(listed)  # e.g. UpdateFeatures: defined, not served
    for key, (low, high) in listed.items():  # never wider than the message definitions
        assert REQUESTS[key].VALID_VERSIONS[1] >= high and low <= high


def test_a_request_for_an_unserved_api_names_it_and_the_client():
    server = ServerConnection(supported=accepted_versions(load_handlers()))
    _, frame = ClientConnection(client_id="acl-tool").send_request(UpdateFeaturesRequest(), 1)
    with pytest.raises(UnsupportedApiError) as e:
        server.receive_data(frame)
    assert (e.value.api_key, e.value.api_version, e.value.api_name, e.value.client_id) == (57, 1, "UpdateFeatures", "acl-tool")
    assert "UpdateFeatures" in str(e.value)


@pytest.mark.parametrize("key, name", [(29, "DescribeAcls"), (76, "ShareGroupHeartbeat"), (4, "LeaderAndIsr"),
                                       (1000, "unknown api key 1000"), (-5, "unknown api key -5")])
def test_api_names(key, name):
    assert api_name(key) == name


def test_a_key_no_one_knows_and_a_header_without_client_id():
    server = ServerConnection(supported=accepted_versions(load_handlers()))
    # api key 1000, version 0, correlation id 7, null client id
    frame = (1000).to_bytes(2, "big") + b"\x00\x00" + (7).to_bytes(4, "big") + b"\xff\xff"
    with pytest.raises(UnsupportedApiError) as e:
        server.receive_data(len(frame).to_bytes(4, "big") + frame)
    assert (e.value.api_name, e.value.client_id) == ("unknown api key 1000", None)
    # Cut short after the api key: still refused, with no client id to report.
    with pytest.raises(UnsupportedApiError) as e:
        ServerConnection(supported={}).receive_data(b"\x00\x00\x00\x04" + frame[:4])
    assert e.value.client_id is None
