"""The controller's view of the cluster's finalized features (Kafka's FeatureControlManager).

Odradek finalizes one feature, `metadata.version`, at the level this release writes: a new cluster's log
starts with its FeatureLevelRecord, and a registering broker must support every finalized level (a broker
that cannot run the cluster's metadata.version would misread its records). UpdateFeatures is not served, so
the level never moves after bootstrap.
"""

from __future__ import annotations

from collections.abc import Iterable

from odradek.protocol.errors import ErrorCode
from odradek.metadata.image import METADATA_VERSION, METADATA_VERSION_FEATURE, MetadataError, MetadataImage
from odradek.metadata.records import FeatureLevelRecord


class FeatureControlManager:
    """See the module doc."""

    def bootstrap_records(self) -> list:
        """The feature levels a new cluster's log starts with."""
        return [FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=METADATA_VERSION)]

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
