"""OAUTHBEARER with unsecured JWTs (protocol/sasl.py, broker/authenticator.py, broker/security.py), on a
fixed clock: the client's message (RFC 7628), Kafka's unsecured validator (alg none, principal claim, exp
with clock skew, iat, required scope), the JSON error status and the client's ^A after it, the session
lifetime bounded by the token's, and the broker settings as Kafka reads them."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from odradek.broker.authenticator import Authenticator, SaslState
from odradek.broker.config import BrokerConfig, ConfigError
from odradek.broker.context import KafkaPrincipal, SecurityProtocol
from odradek.broker.security import ListenerSecurity, listener_security, node_security
from odradek.protocol.errors import ErrorCode
from odradek.protocol.sasl import (
    OAUTHBEARER, OAuthBearerInvalidToken, OAuthBearerServer, SaslAuthenticationFailed, UnsecuredLoginOptions,
    UnsecuredValidatorOptions,
    oauthbearer_client_first, parse_unsecured_jws, unsecured_jwt, validate_unsecured_token,
)

NOW_MS = 1_700_000_000_000
NOW_S = NOW_MS // 1000
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


def token(**claims) -> str:
    return unsecured_jwt({"sub": "alice", "iat": NOW_S - 10, "exp": NOW_S + 3600, **claims})


def server(**options) -> OAuthBearerServer:
    return OAuthBearerServer(UnsecuredValidatorOptions(**options), lambda: NOW_MS)


def test_client_first_message_bytes():
    # librdkafka and Kafka's OAuthBearerClientInitialResponse send exactly this layout
    assert oauthbearer_client_first("a.b.") == b"n,,\x01auth=Bearer a.b.\x01\x01"
    assert (oauthbearer_client_first("a.b.", authzid="x,y", extensions={"traceId": "42"})
            == b"n,a=x=2Cy,\x01auth=Bearer a.b.\x01traceId=42\x01\x01")
    header, claims, signature = unsecured_jwt({"sub": "alice", "exp": 1}).split(".")
    assert signature == "" and "=" not in header + claims
    assert json.loads(__import__("base64").urlsafe_b64decode(header + "==")) == {"alg": "none"}


def test_a_valid_token_authenticates_its_subject():
    s = server()
    assert s.step(oauthbearer_client_first(token(), extensions={"traceId": "t"})) == b""
    assert s.complete and s.username == "alice" and s.extensions == {"traceId": "t"}
    assert s.credential_expiry_ms == (NOW_S + 3600) * 1000
    with pytest.raises(SaslAuthenticationFailed):
        s.step(b"\x01")


def test_principal_and_scope_claim_names_are_options():
    jwt = validate_unsecured_token(token(client_id="svc-1", roles=["kafka", "admin"]),
                                   UnsecuredValidatorOptions(principal_claim_name="client_id", scope_claim_name="roles",
                                                             required_scope=("kafka",)), NOW_MS)
    assert jwt.principal_name == "svc-1" and jwt.scope == {"kafka", "admin"}
    assert parse_unsecured_jws(token(scope="one")).scope == {"one"}


@pytest.mark.parametrize("claims, skew_ms, reason", [
    ({"exp": NOW_S}, 0, "on or after the Expiration Time"),
    ({"exp": NOW_S - 1}, 0, "on or after the Expiration Time"),
    ({"iat": NOW_S + 5}, 0, "Issued At value"),
    ({"iat": NOW_S + 7200}, 0, "Issued At value"),
    ({"exp": "soon"}, 0, "not of type Number"),
    ({"sub": ""}, 0, "No principal name"),
    ({"sub": 7}, 0, "incorrect type"),
])
def test_invalid_tokens_are_refused_with_kafkas_reasons(claims, skew_ms, reason):
    with pytest.raises(OAuthBearerInvalidToken, match=reason):
        validate_unsecured_token(token(**claims), UnsecuredValidatorOptions(allowable_clock_skew_ms=skew_ms), NOW_MS)


def test_clock_skew_allows_a_just_expired_token_and_a_slightly_early_one():
    options = UnsecuredValidatorOptions(allowable_clock_skew_ms=2000)
    assert validate_unsecured_token(token(exp=NOW_S - 1), options, NOW_MS).principal_name == "alice"
    assert validate_unsecured_token(token(iat=NOW_S + 1), options, NOW_MS).principal_name == "alice"
    with pytest.raises(OAuthBearerInvalidToken):
        validate_unsecured_token(token(exp=NOW_S - 2), options, NOW_MS)


def test_malformed_jws_forms():
    good = token()
    header, claims, _ = good.split(".")
    signed = unsecured_jwt({"alg": "HS256"}).split(".")[1]  # a header saying HS256
    for bad, reason in [
        (f"{header}.{claims}.c2ln", "must not contain a digital signature"),
        (f"{signed}.{claims}.", "'none' for an algorithm"),
        (f"{header}.{claims}", "3 dot-separated"),
        (f"{header}..", "'..'"),
        (f"{header}.!!!.", "malformed"),
        (f"{header}.{unsecured_jwt({'x': 1}).split('.')[0][:-2]}.", "malformed"),
        (unsecured_jwt({"sub": "alice"}), "No expiration time"),
    ]:
        with pytest.raises(OAuthBearerInvalidToken, match=reason):
            parse_unsecured_jws(bad)


def test_refusal_is_a_json_status_then_the_clients_ctrl_a_fails():
    s = server()
    answer = s.step(oauthbearer_client_first(token(exp=NOW_S - 60)))
    assert answer == b'{"status":"invalid_token"}' and not s.complete
    assert "Expiration Time" in s.failure_reason
    with pytest.raises(SaslAuthenticationFailed, match="invalid_token"):
        s.step(b"\x01")


def test_a_missing_required_scope_is_insufficient_scope():
    s = server(required_scope=("kafka", "write"))
    answer = s.step(oauthbearer_client_first(token(scope=["kafka"])))
    assert answer == b'{"status":"insufficient_scope", "scope":"[kafka, write]"}'
    with pytest.raises(SaslAuthenticationFailed, match="insufficient_scope"):
        s.step(b"\x01")


@pytest.mark.parametrize("message, reason", [
    (b"n,,auth=Bearer x.y.", "Invalid OAUTHBEARER client first message"),
    (b"y,,\x01auth=Bearer a.b.\x01\x01", "Invalid OAUTHBEARER client first message"),
    (b"n,,\x01other=1\x01\x01", "'auth' not specified"),
    (b"n,,\x01auth=Bearer\x01\x01", "invalid 'auth' format"),
    (b"n,,\x01auth=Basic abc\x01\x01", "Invalid scheme"),
    (b"\xff\xfe", "Invalid OAUTHBEARER client first message"),
])
def test_malformed_client_messages_fail_at_once(message, reason):
    with pytest.raises(SaslAuthenticationFailed, match=reason):
        server().step(message)


def test_an_authorization_id_must_be_the_tokens_principal():
    assert server().step(oauthbearer_client_first(token(), authzid="alice")) == b""
    with pytest.raises(SaslAuthenticationFailed, match="authorization id"):
        server().step(oauthbearer_client_first(token(), authzid="admin"))


def _raw_jwt(claims_json: str) -> str:
    import base64

    part = base64.urlsafe_b64encode(claims_json.encode()).rstrip(b"=").decode()
    return unsecured_jwt({}).split(".")[0] + "." + part + "."


@pytest.mark.parametrize("claims_json", [
    '{"sub":"a","exp":Infinity}', '{"sub":"a","exp":NaN}', '{"sub":"a","exp":-Infinity}',
    '{"sub":"a","exp":1' + "0" * 400 + "}", '{"sub":"a","exp":4000000000,"iat":1e400}',
    '{"sub":"a","exp":4000000000,"x":' + "[" * 100_000 + "]" * 100_000 + "}", "[1,2]", '"text"',
])
def test_hostile_claims_are_invalid_tokens_not_crashes(claims_json):
    with pytest.raises(OAuthBearerInvalidToken):
        validate_unsecured_token(_raw_jwt(claims_json), UnsecuredValidatorOptions(), NOW_MS)
    assert server().step(oauthbearer_client_first(_raw_jwt(claims_json))) == b'{"status":"invalid_token"}'


def test_far_future_times_saturate_like_javas_math_round():
    jwt = validate_unsecured_token(_raw_jwt('{"sub":"a","exp":1e308,"iat":-1e308}'), UnsecuredValidatorOptions(), NOW_MS)
    assert jwt.lifetime_ms == 2**63 - 1 and jwt.start_time_ms == -(2**63)
    auth = authenticator(reauth_ms=5000)
    auth.handshake(OAUTHBEARER, 1)
    assert auth.authenticate(oauthbearer_client_first(_raw_jwt('{"sub":"a","exp":1e308}')), now_ms=0).session_lifetime_ms == 5000


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300) | st.builds(lambda a, b: oauthbearer_client_first(token())[:a] + b + oauthbearer_client_first(token())[a:],
                                           st.integers(0, 40), st.binary(max_size=8)))
def test_random_tokens_answer_or_fail_cleanly(data):
    s = server()
    try:
        s.step(data)
    except SaslAuthenticationFailed:
        return
    if not s.complete:
        with pytest.raises(SaslAuthenticationFailed):
            s.step(b"\x01")


# -- the broker side


def authenticator(reauth_ms: int = 0, **options) -> Authenticator:
    sec = ListenerSecurity("SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT, mechanisms=(OAUTHBEARER,),
                           oauthbearer=UnsecuredValidatorOptions(**options), reauth_ms=reauth_ms)
    return Authenticator(sec, wall_clock_ms=lambda: NOW_MS)


def test_authenticator_principal_and_session_bounded_by_the_token():
    auth = authenticator()
    assert auth.handshake(OAUTHBEARER, 1) == (0, [OAUTHBEARER])
    step = auth.authenticate(oauthbearer_client_first(token(exp=NOW_S + 60)), now_ms=5_000)
    assert step.done and step.error_code == 0 and auth.principal == KafkaPrincipal("User", "alice")
    assert step.session_lifetime_ms == 60_000 and auth.session_expiry_ms == 65_000  # monotonic + what is left
    auth = authenticator(reauth_ms=10_000)
    auth.handshake(OAUTHBEARER, 1)
    assert auth.authenticate(oauthbearer_client_first(token(exp=NOW_S + 60)), now_ms=0).session_lifetime_ms == 10_000
    # re-authentication with a fresh token for the same principal keeps the session
    assert auth.handshake(OAUTHBEARER, 1)[0] == 0
    assert auth.authenticate(oauthbearer_client_first(token(exp=NOW_S + 90)), now_ms=9_000).done
    # and a token for someone else is refused
    assert auth.handshake(OAUTHBEARER, 1)[0] == 0
    step = auth.authenticate(oauthbearer_client_first(token(sub="mallory")), now_ms=18_000)
    assert step.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and auth.state is SaslState.FAILED


def test_authenticator_refusal_takes_two_steps():
    auth = authenticator(required_scope=("kafka",))
    auth.handshake(OAUTHBEARER, 1)
    first = auth.authenticate(oauthbearer_client_first(token()), now_ms=0)
    assert first.error_code == 0 and not first.done and b"insufficient_scope" in first.token
    assert "missing a required scope" in auth.failure_reason
    second = auth.authenticate(b"\x01", now_ms=1)
    assert second.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and "insufficient_scope" in second.error_message
    assert auth.principal is None and auth.state is SaslState.FAILED


def config(**props) -> BrokerConfig:
    return BrokerConfig.from_properties({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "OAUTHBEARER",
                                         **{k: str(v) for k, v in props.items()}})


JAAS_KEY = "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config"


def test_listener_settings_as_kafka_reads_them():
    c = config(**{JAAS_KEY: f'{LOGIN_MODULE} required unsecuredLoginStringClaim_sub="admin" '
                            'unsecuredValidatorPrincipalClaimName="client_id" unsecuredValidatorRequiredScope="kafka write" '
                            'unsecuredValidatorAllowableClockSkewMs="3000";'})
    sec = listener_security(c, "SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT)
    assert sec.mechanisms == (OAUTHBEARER,)
    assert sec.oauthbearer == UnsecuredValidatorOptions("client_id", "scope", ("kafka", "write"), 3000)
    # the broker-wide sasl.jaas.config serves too, with the defaults
    plain = config(**{"sasl.jaas.config": f"{LOGIN_MODULE} required;"})
    assert listener_security(plain, "SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT).oauthbearer == UnsecuredValidatorOptions()


@pytest.mark.parametrize("props, key_part", [
    ({}, "oauthbearer.sasl.jaas.config"),
    ({JAAS_KEY: f'{LOGIN_MODULE} required unsecuredValidatorAllowableClockSkewMs="-1";'}, "oauthbearer.sasl.jaas.config"),
    ({JAAS_KEY: f'{LOGIN_MODULE} required unsecuredValidatorAllowableClockSkewMs="soon";'}, "oauthbearer.sasl.jaas.config"),
    ({JAAS_KEY: f"{LOGIN_MODULE} required;",
      "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class":
          "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"}, "callback.handler.class"),
    ({JAAS_KEY: f"{LOGIN_MODULE} required;", "sasl.oauthbearer.jwks.endpoint.url": "https://idp/jwks"}, "jwks"),
])
def test_settings_we_cannot_honour_refuse_to_start(props, key_part):
    with pytest.raises(ConfigError) as e:
        listener_security(config(**props), "SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT)
    assert key_part in e.value.key


def test_the_default_validator_class_named_explicitly_is_fine():
    c = config(**{JAAS_KEY: f"{LOGIN_MODULE} required;", "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class":
                  "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler"})
    assert listener_security(c, "SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT).oauthbearer is not None


def test_unsecured_login_options_as_kafkas_login_callback_handler_reads_them():
    login = UnsecuredLoginOptions.from_jaas({
        "unsecuredLoginStringClaim_sub": "admin", "unsecuredLoginListClaim_scope": ",kafka,LOGIN_TO_KAFKA",
        "unsecuredLoginNumberClaim_level": "3", "unsecuredLoginLifetimeSeconds": "60",
        "unsecuredLoginExtension_traceId": "t1", "user_bob": "ignored"})
    assert login.principal_name == "admin" and login.extensions == (("traceId", "t1"),)
    jwt = validate_unsecured_token(login.token(NOW_MS + 999), UnsecuredValidatorOptions(required_scope=("kafka",)), NOW_MS + 999)
    assert jwt.principal_name == "admin" and jwt.scope == {"kafka", "LOGIN_TO_KAFKA"} and jwt.claims["level"] == 3
    assert jwt.start_time_ms == NOW_S * 1000 and jwt.lifetime_ms == (NOW_S + 60) * 1000  # iat rounded down
    for bad in ({}, {"unsecuredLoginStringClaim_sub": ""}, {"unsecuredLoginStringClaim_sub": "a", "unsecuredLoginNumberClaim_exp": "1"},
                {"unsecuredLoginStringClaim_sub": "a", "unsecuredLoginLifetimeSeconds": "0"},
                {"unsecuredLoginStringClaim_sub": "a", "unsecuredLoginNumberClaim_n": "many"}):
        with pytest.raises(ValueError):
            UnsecuredLoginOptions.from_jaas(bad)


def test_nodes_log_in_with_their_own_unsecured_token():
    c = config(**{JAAS_KEY: f'{LOGIN_MODULE} required unsecuredLoginStringClaim_sub="broker";',
                  "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER"})
    node = node_security(c, "SASL_PLAINTEXT", "sasl.mechanism.inter.broker.protocol")
    assert node.mechanism == OAUTHBEARER and node.username == "broker"
    assert validate_unsecured_token(node.oauth_login.token(NOW_MS), UnsecuredValidatorOptions(), NOW_MS).principal_name == "broker"
    with pytest.raises(ConfigError) as e:  # no principal to put in the token
        node_security(config(**{JAAS_KEY: f"{LOGIN_MODULE} required;", "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER"}),
                      "SASL_PLAINTEXT", "sasl.mechanism.inter.broker.protocol")
    assert "oauthbearer.sasl.jaas.config" in e.value.key and "unsecuredLoginStringClaim_sub" in str(e.value)


# -- the bundled client's settings (librdkafka's names)


def test_bundled_client_oauthbearer_settings():
    from odradek.client.config import ClientConfig, ConfigError as ClientConfigError, unsecured_jwt_settings
    from odradek.client.connection import ClientSecurity, oauthbearer_token

    settings = unsecured_jwt_settings("principal=alice scope=kafka,write lifeSeconds=60 extension_traceId=abc")
    assert settings["principal"] == "alice" and settings["scope"] == ["kafka", "write"] and settings["lifeSeconds"] == 60
    assert settings["extensions"] == {"traceId": "abc"}
    for bad in ("scope=kafka", "principal=a lifeSeconds=soon", "principal=a colour=blue", "principal"):
        with pytest.raises(ClientConfigError):
            unsecured_jwt_settings(bad)
    base = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "oauthbearer"}
    with pytest.raises(ClientConfigError, match="oauth_cb"):
        ClientConfig(**base)
    config = ClientConfig(**base, enable_sasl_oauthbearer_unsecure_jwt=True,
                          sasl_oauthbearer_config="principal=alice scope=kafka extension_traceId=abc")
    token, extensions = ClientSecurity.from_config(config).oauth_token()
    jwt = validate_unsecured_token(token, UnsecuredValidatorOptions(required_scope=("kafka",)),
                                   int(__import__("time").time() * 1000))
    assert jwt.principal_name == "alice" and extensions == {"traceId": "abc"}
    strings = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.config": "principal=a"}
    assert ClientConfig.from_dict({**strings, "enable.sasl.oauthbearer.unsecure.jwt": "true"}).enable_sasl_oauthbearer_unsecure_jwt is True
    with pytest.raises(ClientConfigError, match="oauth_cb"):  # "false" as text is false, not a truthy string
        ClientConfig.from_dict({**strings, "enable.sasl.oauthbearer.unsecure.jwt": "false"})
    with_cb = ClientConfig(**base, oauth_cb=lambda cfg: ("a.b.", 0, "x", {"k": "v"}))
    assert oauthbearer_token(with_cb) == ("a.b.", {"k": "v"})
