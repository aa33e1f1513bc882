"""SaslHandshake (17), SaslAuthenticate (36), DescribeUserScramCredentials (50), AlterUserScramCredentials (51).

On a SASL listener the network layer (broker/authenticator.py) answers SaslHandshake and SaslAuthenticate
itself, before and during re-authentication; they reach these handlers only on listeners without SASL,
where Kafka answers ILLEGAL_SASL_STATE. They are registered so that ApiVersions advertises them.

SCRAM credentials live in the metadata log (UserScramCredentialRecord: salt, StoredKey, ServerKey,
iterations; never the password). AlterUserScramCredentials carries the salted password the client
computed; the controller derives the keys and decides each user's outcome
(metadata/controller/scram_control.py). Results come one per distinct user name, as Kafka's ControllerApis
answers.
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
from odradek.metadata.acl import AclOperation, ResourceType
from odradek.metadata.image import MetadataError

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

    def answer(results):
        (outcome,) = results
        if isinstance(outcome, MetadataError):  # the records were refused: every user named gets the error
            users = dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
            return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
                Result(user=name, error_code=int(outcome.error_code), error_message=outcome.message) for name in users
            ])
        return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
            Result(user=name, error_code=code, error_message=message) for name, (code, message) in outcome.items()
        ])

    changes = services.controller.alter_user_scram_credentials(request.deletions, request.upsertions)
    return services.answer(changes, answer)
