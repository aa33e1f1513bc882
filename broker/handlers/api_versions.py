"""ApiVersions (18): the table is derived from the registered handlers (see handlers/__init__).

Since v3 the response also carries the cluster's features (KIP-584), in three tagged fields: the features
this broker supports with the range of levels it can run, the levels the cluster has finalized, and the
finalized levels' epoch. Kafka's Java client reads them for Admin.describeFeatures (DescribeFeatures has no
RPC of its own: the admin asks ApiVersions) and decides from `transaction.version` whether to speak
Transactions V2. The finalized levels are the metadata image's (FeatureLevelRecords,
metadata/controller/feature_control.py) and their epoch is the metadata log offset that image reflects, as in
KRaft Kafka, so the answer follows the image; `ApiVersionsAnswers` rebuilds it only when the image moves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.metadata.image import (
    ELR_VERSION,
    ELR_VERSION_FEATURE,
    METADATA_VERSION,
    METADATA_VERSION_FEATURE,
    SHARE_VERSION,
    SHARE_VERSION_FEATURE,
    TRANSACTION_VERSION,
    TRANSACTION_VERSION_FEATURE,
)
from odradek.protocol.messages import ApiVersionsResponse

from . import BROKER, CONTROLLER, Answer, handles

if TYPE_CHECKING:
    from collections.abc import Mapping

    from odradek.metadata.image import MetadataImage
    from odradek.metadata.publisher import MetadataPublisher
    from odradek.protocol.messages import ApiVersionsRequest
    from ..context import RequestContext
    from ..services import BrokerServices

SUPPORTED_FEATURES: Mapping[str, tuple[int, int]] = {
    METADATA_VERSION_FEATURE: (METADATA_VERSION, METADATA_VERSION),
    ELR_VERSION_FEATURE: (0, ELR_VERSION),
    TRANSACTION_VERSION_FEATURE: (0, TRANSACTION_VERSION),
    SHARE_VERSION_FEATURE: (0, SHARE_VERSION),
}
"""The features this release can run, with the (min, max) levels of each: `metadata.version` at the one level
Odradek writes (3.3-IV3, which is also Kafka 4.x's minimum); `eligible.leader.replicas.version` 0-1 (KIP-966's
ELR, finalized at 1 in a new cluster); `transaction.version` 0-2 (2 is KIP-890's Transactions V2, the level a
new cluster finalizes, as Kafka 4.x does; see coordinator/transaction/); and `share.version` 0-2 (KIP-932's
share groups at 1, with KIP-1191's dead-letter queues at 2; a new cluster finalizes 2, Kafka 4.4's default). A range starting at 0 is left out of answers to ApiVersions v0-3, as Kafka
does (KAFKA-17011/KAFKA-17492: clients of those versions refuse a minimum of 0; they could not use the
feature anyway). Kafka 4.x brokers also list kraft.version, group.version and streams.version. group.version
1 is the gate Kafka puts on KIP-848 consumer groups, which Odradek does serve, but finalizing it takes a
FeatureLevelRecord the controller does not write at bootstrap (and UpdateFeatures is not served, so an
existing cluster could never reach it), and Odradek does not gate ConsumerGroupHeartbeat on it; listing
group.version as supported but never finalized would promise an upgrade nobody can make."""

FIRST_VERSION_WITH_MIN_LEVEL_0 = 4
"""ApiVersions v4 (Kafka 3.9, KAFKA-17011): the first version whose clients accept a supported range from 0."""


def build_response(table: dict[int, tuple[int, int]]) -> ApiVersionsResponse:
    """The API table alone, with no features: what the handshake needs before any metadata is known."""
    keys = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(table.items())]
    return ApiVersionsResponse(error_code=0, api_keys=keys, throttle_time_ms=0)


def with_features(base: ApiVersionsResponse, finalized: Mapping[str, int], epoch: int,
                  supported: Mapping[str, tuple[int, int]] = SUPPORTED_FEATURES, *,
                  request_version: int = FIRST_VERSION_WITH_MIN_LEVEL_0) -> ApiVersionsResponse:
    """`base`'s API table with the features added. A feature finalized at level 0 is off and is not listed,
    as Kafka lists it; KIP-778 dropped finalized minimum levels, so each is sent with min = max = its level.
    Below ApiVersions v4 a supported range starting at 0 is left out (see SUPPORTED_FEATURES)."""
    if request_version < FIRST_VERSION_WITH_MIN_LEVEL_0:
        supported = {name: r for name, r in supported.items() if r[0] > 0}
    return ApiVersionsResponse(
        error_code=base.error_code,
        api_keys=base.api_keys,
        throttle_time_ms=base.throttle_time_ms,
        supported_features=[
            ApiVersionsResponse.SupportedFeatureKey(name=name, min_version=lo, max_version=hi)
            for name, (lo, hi) in sorted(supported.items())
        ],
        finalized_features_epoch=epoch,
        finalized_features=[
            ApiVersionsResponse.FinalizedFeatureKey(name=name, max_version_level=level, min_version_level=level)
            for name, level in sorted(finalized.items()) if level > 0
        ],
    )


class ApiVersionsAnswers:
    """One listener's ApiVersions answer, rebuilt when the metadata image or its offset changes and shared by
    every request in between (a connection's first request; a reconnect storm costs one build per image).
    Two variants: v4+, and v3 and older without the supported features whose range starts at 0."""

    __slots__ = ("base", "_image", "_offset", "_answers")

    def __init__(self, base: ApiVersionsResponse) -> None:
        self.base = base
        self._image: MetadataImage | None = None
        self._offset = -1
        self._answers: dict[bool, ApiVersionsResponse] = {}  # by "v4 or later" (see SUPPORTED_FEATURES)

    def answer(self, metadata: MetadataPublisher, version: int = FIRST_VERSION_WITH_MIN_LEVEL_0) -> ApiVersionsResponse:
        image, offset = metadata.image, metadata.offset
        if image is not self._image or offset != self._offset:
            self._answers.clear()
            self._image, self._offset = image, offset
        modern = version >= FIRST_VERSION_WITH_MIN_LEVEL_0
        answer = self._answers.get(modern)
        if answer is None:
            answer = self._answers[modern] = with_features(self.base, image.features, offset, request_version=version)
        return answer


@handles(18, listeners=(BROKER, CONTROLLER))
def handle_api_versions(services: BrokerServices, ctx: RequestContext, request: ApiVersionsRequest) -> Answer:
    """Each kind of listener lists what it serves: the broker listeners the client APIs, the controller
    listeners the quorum's and the brokers' RPCs; both with the features of the image this node holds."""
    answers = services.controller_api_versions_response if ctx.connection.scope == CONTROLLER else services.api_versions_response
    if isinstance(answers, ApiVersionsAnswers):
        return answers.answer(services.metadata, ctx.api_version)
    return answers
