"""The controller's view of the cluster's finalized features (Kafka's FeatureControlManager).

Odradek finalizes three features in a new cluster's log: `metadata.version`, at the level this release
writes, `eligible.leader.replicas.version` 1 (KIP-966's ELR, on by default for new clusters since Kafka
4.1), `transaction.version` 2 (KIP-890's Transactions V2, Kafka 4.x's default for a new cluster) and
`share.version` 2 (KIP-932's share groups, on by default for new clusters since Kafka 4.2, with KIP-1191's
dead-letter queues at level 2, Kafka 4.4's default). A level formatting
put in the bootstrap records (`odradek storage format --feature transaction.version=1`) replaces the default,
as Kafka's `kafka-storage format --feature` does. A registering broker must support every finalized level it
names (a broker that cannot run the
cluster's metadata.version would misread its records). UpdateFeatures is not served, so the levels never
move after bootstrap: a cluster formatted before ELR keeps it off.
"""

from __future__ import annotations

from collections.abc import Iterable

from odradek.protocol.errors import ErrorCode
from odradek.metadata.image import (
    ELR_VERSION,
    ELR_VERSION_FEATURE,
    METADATA_VERSION,
    METADATA_VERSION_FEATURE,
    TRANSACTION_VERSION,
    TRANSACTION_VERSION_FEATURE,
    SHARE_VERSION,
    SHARE_VERSION_FEATURE,
    MetadataError,
    MetadataImage,
)
from odradek.metadata.records import FeatureLevelRecord


class FeatureControlManager:
    """See the module doc."""

    def bootstrap_records(self, formatted: Iterable = ()) -> list:
        """The feature levels a new cluster's log starts with; `formatted` (the records formatting left) may
        set a feature's level in place of the default (its own FeatureLevelRecord is then the only one)."""
        chosen = {r.name for r in formatted if isinstance(r, FeatureLevelRecord)}
        return [record for record in (
            FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=METADATA_VERSION),
            FeatureLevelRecord(name=ELR_VERSION_FEATURE, feature_level=ELR_VERSION),
            FeatureLevelRecord(name=TRANSACTION_VERSION_FEATURE, feature_level=TRANSACTION_VERSION),
            FeatureLevelRecord(name=SHARE_VERSION_FEATURE, feature_level=SHARE_VERSION),
        ) if record.name not in chosen]

    def check_broker_features(self, image: MetadataImage, features: Iterable) -> None:
        """A registering broker's supported ranges (BrokerRegistrationRequest.features) against the finalized
        levels; MetadataError(UNSUPPORTED_VERSION) for one it cannot run."""
        for feature in features:
            level = image.features.get(feature.name, 0)
            if level and not feature.min_supported_version <= level <= feature.max_supported_version:
                raise MetadataError(
                    ErrorCode.UNSUPPORTED_VERSION,
                    f"Unable to register because the broker does not support finalized version {level} of "
                    f"{feature.name}. The broker wants a version between {feature.min_supported_version} and "
                    f"{feature.max_supported_version}, inclusive.",
                )
