"""The fast-path tax paid once (issue 25): one admission step before the produce fork, the rules both sides
of it ask, and one result type after it.

* Admission: a produce frame on a SASL listener has its session checked once, whether the fast path
  serves it or declines it to the general path (which used to check it again).
* DECLINED, not None, is the fast path's "not served": the frame is then decoded and dispatched.
* `write_refusal` is produce's authorization for both paths; asked by the fast path with
  `log_denied=False`, its refusal is audited by the general path alone.
* `Log.in_open_transaction` is the verification rule both paths meet: the fast path asks it, the general
  path meets it inside `maybe_start_transaction_verification` (SENTINEL exactly when it holds).
"""

from __future__ import annotations

import pytest

from odradek.broker.authenticator import Authenticator
from odradek.broker.authorizer import AUDIT_LOGGER
from odradek.broker.context import DECLINED, Packed, SecurityProtocol
from odradek.broker.handlers import accepted_versions, advertised_versions, load_handlers
from odradek.broker.handlers.api_versions import build_response
from odradek.broker.handlers.produce import write_refusal
from odradek.broker.network import KafkaProtocol, NetworkServer
from odradek.broker.security import ListenerSecurity
from odradek.broker.services import BrokerServices
from odradek.metadata.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from odradek.protocol.messages import REQUESTS
from odradek.protocol.records import COMMIT, build_batch, build_control_batch
from odradek.protocol.sasl import plain_token
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.producer_state import SENTINEL, AppendOrigin

from tests.harness.audit import audit_lines, authorizer, context  # noqa: F401 (audit_lines: a fixture)
from tests.harness.sasl import Client, FakeTransport, produce

SaslHandshakeRequest, SaslAuthenticateRequest = REQUESTS[17], REQUESTS[36]


# -- admission and the fork


def sasl_connection(fast_answer):
    """A logged-in SASL connection whose fast path answers `fast_answer`; what reached each side is kept."""
    registry = load_handlers()
    api_versions = build_response(advertised_versions(registry))
    seen = {"fast": 0, "dispatched": []}

    def serve_produce_frame(frame, connection):
        seen["fast"] += 1
        return fast_answer

    def dispatch(ctx):
        if ctx.api_key == 18:
            return api_versions
        seen["dispatched"].append(ctx.api_key)
        return None  # (as acks=0: no response)

    server = NetworkServer(dispatch=dispatch, serve_produce_frame=serve_produce_frame,
                           accepted_versions=accepted_versions(registry), advertised_versions=advertised_versions(registry),
                           max_frame_bytes=100 << 20, max_connections=1000, queued_max_requests=500,
                           connections_max_idle_ms=600_000)
    security = ListenerSecurity("SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT, mechanisms=("PLAIN",),
                                plain_users={"bob": "bob-secret"}, failed_authentication_delay_ms=0, reauth_ms=60_000)
    proto = KafkaProtocol(server, "SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT, "broker", security)
    transport = FakeTransport()
    proto.connection_made(transport)
    client = Client(proto, transport)
    client.call(SaslHandshakeRequest(mechanism="PLAIN"), 1)
    assert client.call(SaslAuthenticateRequest(auth_bytes=plain_token("bob", "bob-secret")), 2).error_code == 0
    return client, transport, seen


@pytest.fixture
def session_checks(monkeypatch):
    calls = []
    real = Authenticator.session_admits

    def counting(self, now_ms):
        calls.append(now_ms)
        return real(self, now_ms)

    monkeypatch.setattr(Authenticator, "session_admits", counting)
    return calls


@pytest.mark.parametrize("fast_answer", [Packed([b""]), DECLINED], ids=["served", "declined"])
def test_the_session_is_checked_once_per_request_on_either_side_of_the_fork(fast_answer, session_checks):
    client, transport, seen = sasl_connection(fast_answer)
    produce(client)
    assert seen["fast"] == 1 and len(session_checks) == 1 and not transport.closed
    # Declined: the frame is decoded and dispatched, and nothing more is asked of the session.
    assert seen["dispatched"] == ([] if fast_answer is not DECLINED else [0])


# -- authorization: one rule for both paths


class Services:
    """What `write_refusal` reads of the broker's services: the authorizer, and its two questions."""

    authorized = BrokerServices.authorized
    authorized_names = BrokerServices.authorized_names

    def __init__(self, authorizer=None):
        self.authorizer = authorizer


def alice_writes(*names: str, transactional_id: str | None = None):
    bindings = [AclBinding(ResourceType.TOPIC, name, PatternType.LITERAL, "User:alice", "*", AclOperation.WRITE,
                           AclPermissionType.ALLOW) for name in names]
    if transactional_id is not None:
        bindings.append(AclBinding(ResourceType.TRANSACTIONAL_ID, transactional_id, PatternType.LITERAL, "User:alice",
                                   "*", AclOperation.WRITE, AclPermissionType.ALLOW))
    return Services(authorizer(*bindings))


def test_without_an_authorizer_only_transactional_records_without_a_transactional_id_are_refused():
    services = Services()
    who = context("User:alice", 0)
    assert write_refusal(services, who, None, False, ["a"]) is None
    assert write_refusal(services, who, "tx", True, ["a"]) is None
    assert write_refusal(services, who, None, True, ["a"]) is True  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_with_an_authorizer_the_transactional_id_then_each_topic():
    services = alice_writes("a", transactional_id="tx")
    who = context("User:alice", 0)
    assert not write_refusal(services, who, None, False, ["a"])
    assert write_refusal(services, who, None, False, ["a", "b"]) == {"b"}
    assert write_refusal(services, who, "other", True, ["a"]) is True
    assert not write_refusal(services, who, "tx", True, ["a"])
    # Asked with a connection's context (the fast path has no request context): the same answers.
    assert write_refusal(services, who.connection, None, False, ["a", "b"]) == {"b"}


def test_a_refusal_the_fast_path_declines_on_is_audited_once_by_the_general_path(audit_lines):  # noqa: F811
    services = alice_writes("a")
    who = context("User:alice", 0)
    assert write_refusal(services, who.connection, None, False, ["b"], log_denied=False) == {"b"}  # fast: declines
    assert [line for line in audit_lines() if line["logger"] == AUDIT_LOGGER] == []
    assert write_refusal(services, who, None, False, ["b"]) == {"b"}  # general: answers TOPIC_AUTHORIZATION_FAILED
    assert [line["resource"] for line in audit_lines() if line["logger"] == AUDIT_LOGGER] == ["Topic:LITERAL:b"]


# -- verification: the log's one rule

NOW = 1_700_000_000_000
PID, EPOCH = 4000, 0


def txn(seq: int, epoch: int = EPOCH) -> bytearray:
    return bytearray(build_batch([(b"k", b"v%d" % seq, None, NOW)], producer_id=PID, producer_epoch=epoch,
                                 base_sequence=seq, transactional=True))


def test_in_open_transaction_is_what_maybe_start_verification_answers_sentinel_for(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), LogConfig(segment_bytes=1 << 20), now_ms=NOW)

    def agree(epoch: int, seq: int) -> bool:
        open_here = log.in_open_transaction(PID, epoch)
        assert open_here == (log.maybe_start_transaction_verification(PID, seq, epoch, NOW) is SENTINEL)
        return open_here

    assert not agree(EPOCH, 0)  # no producer state yet
    log.append(txn(0), leader_epoch=0, now_ms=NOW, verification_guard=log.maybe_start_transaction_verification(PID, 0, EPOCH, NOW))
    assert agree(EPOCH, 1)  # the transaction is open here
    assert not agree(EPOCH + 1, 0)  # another epoch of the producer
    log.append(bytearray(build_control_batch(COMMIT, PID, EPOCH, 0, NOW)), leader_epoch=0, now_ms=NOW,
               origin=AppendOrigin.COORDINATOR)
    assert not agree(EPOCH, 2)  # ended: the next transaction is verified again
