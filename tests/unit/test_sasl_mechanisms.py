"""protocol.sasl: SCRAM against RFC 7677's test vector, both sides; PLAIN; malformed tokens fail cleanly."""

import base64

import pytest
from hypothesis import given, settings, strategies as st

from odradek.protocol.sasl import (
    PlainServer, SaslAuthenticationFailed, ScramClient, ScramMechanism, ScramServer, plain_token, scram_credential,
)

# RFC 7677 section 3
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

SHA256 = ScramMechanism.SCRAM_SHA_256
CRED = scram_credential(SHA256, "pencil", SALT, 4096)


def users(name):
    return CRED if name == "user" else None


def test_rfc7677_server_side():
    server = ScramServer(SHA256, users, SERVER_NONCE)
    assert server.step(CLIENT_FIRST) == SERVER_FIRST
    assert server.step(CLIENT_FINAL) == SERVER_FINAL
    assert server.complete and server.username == "user"


def test_rfc7677_client_side():
    client = ScramClient(SHA256, "user", "pencil", CLIENT_NONCE)
    assert client.first() == CLIENT_FIRST
    assert client.final(SERVER_FIRST) == CLIENT_FINAL
    client.verify(SERVER_FINAL)
    with pytest.raises(SaslAuthenticationFailed):
        client.verify(b"v=" + base64.b64encode(b"x" * 32))


def test_wrong_password_and_unknown_user_fail_with_kafkas_message():
    server = ScramServer(SHA256, users, SERVER_NONCE)
    client = ScramClient(SHA256, "user", "pen", CLIENT_NONCE)
    first = server.step(client.first())
    with pytest.raises(SaslAuthenticationFailed, match="invalid credentials with SASL mechanism SCRAM-SHA-256"):
        server.step(client.final(first))
    assert not server.complete
    with pytest.raises(SaslAuthenticationFailed, match="invalid credentials"):
        ScramServer(SHA256, users, SERVER_NONCE).step(b"n,,n=nobody,r=abc")


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_round_trip_each_mechanism_and_escaped_names(mechanism):
    cred = scram_credential(mechanism, "s3cr=t,", b"salt-bytes", 4096)
    server = ScramServer(mechanism, lambda n: cred if n == "a,b=c" else None, "srv")
    client = ScramClient(mechanism, "a,b=c", "s3cr=t,", "cli")
    client.verify(server.step(client.final(server.step(client.first()))))
    assert server.username == "a,b=c"


def test_replayed_final_fails_under_a_new_server_nonce():
    server = ScramServer(SHA256, users, SERVER_NONCE)
    server.step(CLIENT_FIRST)
    server.step(CLIENT_FINAL)
    other = ScramServer(SHA256, users, "another-nonce")
    other.step(CLIENT_FIRST)
    with pytest.raises(SaslAuthenticationFailed):
        other.step(CLIENT_FINAL)


def test_credential_repr_hides_keys():
    assert "stored" not in repr(CRED) and CRED.stored_key.hex() not in repr(CRED)


def test_plain():
    server = PlainServer(lambda u, p: (u, p) == ("alice", "pw"))
    assert server.step(plain_token("alice", "pw")) == b"" and server.username == "alice"
    for token in (plain_token("alice", "bad"), plain_token("bob", "pw"), b"alice\x00pw", plain_token("alice", "pw", "bob")):
        with pytest.raises(SaslAuthenticationFailed):
            PlainServer(lambda u, p: (u, p) == ("alice", "pw")).step(token)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=200), min_size=1, max_size=3))
def test_garbage_tokens_only_ever_fail_cleanly(tokens):
    server = ScramServer(ScramMechanism.SCRAM_SHA_512, lambda n: scram_credential(ScramMechanism.SCRAM_SHA_512, "x", b"s", 4096) if n == "u" else None, "n")
    for token in [b"n,,n=u,r=x", *tokens]:
        try:
            server.step(token)
        except SaslAuthenticationFailed:
            break
    assert not server.complete
