"""SaslHandshake (17), SaslAuthenticate (36), DescribeUserScramCredentials (50), AlterUserScramCredentials (51).

On a SASL listener the network layer (broker/authenticator.py) answers SaslHandshake and SaslAuthenticate
itself, before and during re-authentication; they reach these handlers only on listeners without SASL,
where Kafka answers ILLEGAL_SASL_STATE. They are registered so that ApiVersions advertises them.

SCRAM credentials live in the metadata log (UserScramCredentialRecord: salt, StoredKey, ServerKey,
iterations; never the password). AlterUserScramCredentials carries the salted password the client
computed; the controller derives the keys. Results come one per distinct user name, as Kafka's
ControllerApis answers; a user named in both a deletion and an upsertion of the same mechanism, an unknown
mechanism, or iterations outside 4096..16384 fail that user only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsResponse,
    SaslAuthenticateResponse,
    SaslHandshakeResponse,
)
from odradek.protocol.sasl import MAX_ITERATIONS, MIN_ITERATIONS, ScramMechanism, credential_from_salted_password
from odradek.metadata.acl import AclOperation, ResourceType
from odradek.metadata.image import MetadataError
from odradek.metadata.records import RemoveUserScramCredentialRecord, UserScramCredentialRecord

from ..authorizer import requires
from . import BROKER, CONTROLLER, Answer, handles
from .envelope import forwarded

if TYPE_CHECKING:
    from odradek.protocol.messages import (
        AlterUserScramCredentialsRequest,
        DescribeUserScramCredentialsRequest,
        SaslAuthenticateRequest,
        SaslHandshakeRequest,
    )
    from ..context import RequestContext
    from ..services import BrokerServices

_MECHANISM_IDS = {int(m) for m in ScramMechanism}


@handles(17, listeners=(BROKER, CONTROLLER))
def handle_sasl_handshake(services: BrokerServices, ctx: RequestContext, request: SaslHandshakeRequest) -> Answer:
    return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])


@handles(36, listeners=(BROKER, CONTROLLER))
def handle_sasl_authenticate(services: BrokerServices, ctx: RequestContext, request: SaslAuthenticateRequest) -> Answer:
    return SaslAuthenticateResponse(
        error_code=ErrorCode.ILLEGAL_SASL_STATE, auth_bytes=b"",
        error_message="Unexpected SaslAuthenticate: this listener does not use SASL",
    )


@handles(50, listeners=(BROKER, CONTROLLER))
@requires(AclOperation.DESCRIBE)
def handle_describe_user_scram_credentials(services: BrokerServices, ctx: RequestContext,
                                           request: DescribeUserScramCredentialsRequest) -> Answer:
    credentials = services.image.scram_credentials
    by_user: dict[str, list] = {}
    for (name, mechanism), credential in sorted(credentials.items()):
        by_user.setdefault(name, []).append(
            DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult.CredentialInfo(
                mechanism=mechanism, iterations=credential.iterations)
        )
    Result = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
    results = []
    if not request.users:  # null or empty: every user
        results = [Result(user=name, error_code=0, credential_infos=infos) for name, infos in by_user.items()]
    else:
        names = [u.name for u in request.users]
        duplicates = {n for n in names if names.count(n) > 1}
        for name in dict.fromkeys(names):
            if name in duplicates:
                results.append(Result(user=name, error_code=ErrorCode.DUPLICATE_RESOURCE,
                                      error_message=f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}"))
            elif name not in by_user:
                results.append(Result(user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                                      error_message=f"Attempt to describe a user credential that does not exist: {name}"))
            else:
                results.append(Result(user=name, error_code=0, credential_infos=by_user[name]))
    return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=0, results=results)


def decide_scram_changes(image, deletions, upsertions) -> tuple[list, dict[str, tuple[int, str | None]]]:
    """The records for a request's changes against `image`, and each user's (error code, message)."""
    outcome: dict[str, tuple[int, str | None]] = {}
    users = list(dict.fromkeys([d.name for d in deletions] + [u.name for u in upsertions]))
    seen: dict[tuple[str, int], int] = {}
    for item in [*deletions, *upsertions]:
        seen[(item.name, item.mechanism)] = seen.get((item.name, item.mechanism), 0) + 1

    def fail(name: str, code: ErrorCode, message: str) -> None:
        outcome.setdefault(name, (int(code), message))

    for item in [*deletions, *upsertions]:
        if not item.name:
            fail(item.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif item.mechanism not in _MECHANISM_IDS:
            fail(item.name, ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {item.mechanism}")
        elif seen[(item.name, item.mechanism)] > 1:
            fail(item.name, ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
    for d in deletions:
        if d.name not in outcome and (d.name, d.mechanism) not in image.scram_credentials:
            fail(d.name, ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
    for u in upsertions:
        if u.name in outcome:
            continue
        if not MIN_ITERATIONS <= u.iterations <= MAX_ITERATIONS:
            fail(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL,
                 f"Iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")
        elif not u.salt or not u.salted_password:
            fail(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
    records = []
    for d in deletions:
        if d.name not in outcome:
            records.append(RemoveUserScramCredentialRecord(name=d.name, mechanism=d.mechanism))
    for u in upsertions:
        if u.name not in outcome:
            c = credential_from_salted_password(ScramMechanism(u.mechanism), bytes(u.salted_password), bytes(u.salt), u.iterations)
            records.append(UserScramCredentialRecord(name=u.name, mechanism=u.mechanism, salt=c.salt,
                                                     stored_key=c.stored_key, server_key=c.server_key, iterations=c.iterations))
    for name in users:
        outcome.setdefault(name, (0, None))
    # Kafka applies a user's changes only if all of them are acceptable: drop the records of failed users.
    failed = {name for name, (code, _) in outcome.items() if code}
    return [r for r in records if r.name not in failed], outcome


@handles(51, listeners=(BROKER, CONTROLLER))
@forwarded
def handle_alter_user_scram_credentials(services: BrokerServices, ctx: RequestContext,
                                        request: AlterUserScramCredentialsRequest) -> Answer:
    if not services.authorized(ctx, AclOperation.ALTER, ResourceType.CLUSTER):
        users = dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
        return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
            AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult(
                user=user, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), error_message=None) for user in users])
    Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
    outcome_holder: dict = {}

    def decide(image):
        records, outcome = decide_scram_changes(image, request.deletions, request.upsertions)
        outcome_holder.update(outcome)
        return records, None

    def answer(results):
        error = results[0] if results else None
        return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
            Result(user=name, error_code=int(error.error_code), error_message=error.message)
            if isinstance(error, MetadataError) else Result(user=name, error_code=code, error_message=message)
            for name, (code, message) in outcome_holder.items()
        ])

    return services.answer(services.controller.alter_user_scram_credentials(decide), answer)
