"""ApiVersions v3+ carries the cluster's features (KIP-584): what this broker supports, and the levels the
metadata image has finalized with the offset of that image as their epoch (broker/handlers/api_versions.py)."""

from __future__ import annotations

import pytest

from odradek.broker.handlers.api_versions import ApiVersionsAnswers, build_response
from odradek.metadata.image import METADATA_VERSION, METADATA_VERSION_FEATURE, TRANSACTION_VERSION_FEATURE, MetadataDelta
from odradek.metadata.publisher import EMPTY_IMAGE, MetadataPublisher, MetadataUpdate
from odradek.metadata.records import FeatureLevelRecord
from odradek.protocol.connection import ClientConnection, ServerConnection
from odradek.protocol.messages import REQUESTS

TABLE = {0: (0, 13), 18: (0, 4)}


def _publish(publisher: MetadataPublisher, records, offset: int) -> None:
    delta = MetadataDelta(publisher.image)
    for record in records:
        delta.replay(record)
    publisher.publish(MetadataUpdate.from_delta(delta, delta.apply(), offset))


def test_before_any_metadata_the_answer_lists_support_but_nothing_finalized():
    answer = ApiVersionsAnswers(build_response(TABLE)).answer(MetadataPublisher())
    assert [(k.api_key, k.min_version, k.max_version) for k in answer.api_keys] == [(0, 0, 13), (18, 0, 4)]
    assert [(f.name, f.min_version, f.max_version) for f in answer.supported_features] == [
        ("eligible.leader.replicas.version", 0, 1), (METADATA_VERSION_FEATURE, METADATA_VERSION, METADATA_VERSION),
        ("share.version", 0, 2), (TRANSACTION_VERSION_FEATURE, 0, 2),
    ]
    assert answer.finalized_features == [] and answer.finalized_features_epoch == -1


def test_a_range_from_0_is_left_out_below_v4_as_kafka_does():
    """KAFKA-17492: ApiVersions v0-3 clients refuse a supported minimum of 0; transaction.version (0-2) is
    listed from v4 only, its finalized level in both."""
    publisher = MetadataPublisher()
    _publish(publisher, [FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=METADATA_VERSION),
                         FeatureLevelRecord(name=TRANSACTION_VERSION_FEATURE, feature_level=2)], 4)
    answers = ApiVersionsAnswers(build_response(TABLE))
    old, new = answers.answer(publisher, 3), answers.answer(publisher, 4)
    assert [f.name for f in old.supported_features] == [METADATA_VERSION_FEATURE]
    assert [f.name for f in new.supported_features] == ["eligible.leader.replicas.version", METADATA_VERSION_FEATURE,
                                                         "share.version",
                                                         TRANSACTION_VERSION_FEATURE]
    for answer in (old, new):
        assert {(f.name, f.max_version_level) for f in answer.finalized_features} == {
            (METADATA_VERSION_FEATURE, METADATA_VERSION), (TRANSACTION_VERSION_FEATURE, 2)}
    assert answers.answer(publisher, 2) is old and answers.answer(publisher, 4) is new  # cached per kind


def test_a_new_cluster_finalizes_transaction_version_2_unless_formatted_otherwise(tmp_path):
    from odradek.broker.storage_tool import parse_feature, read_bootstrap_records, write_bootstrap_records
    from odradek.metadata.controller.feature_control import FeatureControlManager
    from odradek.metadata.image import replay_all

    features = FeatureControlManager()
    assert replay_all(features.bootstrap_records()).features[TRANSACTION_VERSION_FEATURE] == 2
    write_bootstrap_records(str(tmp_path), [parse_feature("transaction.version=1")])
    formatted = read_bootstrap_records(str(tmp_path))
    image = replay_all([*features.bootstrap_records(formatted), *formatted])
    assert image.features[TRANSACTION_VERSION_FEATURE] == 1 and image.features[METADATA_VERSION_FEATURE] == METADATA_VERSION
    for bad in ("transaction.version=3", "transaction.version=0", "group.version=1", "transaction.version"):
        with pytest.raises(ValueError):
            parse_feature(bad)


def test_a_v3_answer_leaves_out_the_features_whose_range_starts_at_0():
    """KAFKA-17011: ApiVersions v3 clients refuse a supported feature with min version 0 (share.version)."""
    publisher = MetadataPublisher()
    _publish(publisher, [FeatureLevelRecord(name="share.version", feature_level=1)], 4)
    answers = ApiVersionsAnswers(build_response(TABLE))
    assert [f.name for f in answers.answer(publisher, 3).supported_features] == [METADATA_VERSION_FEATURE]
    assert [f.name for f in answers.answer(publisher, 4).supported_features] == [
        "eligible.leader.replicas.version", METADATA_VERSION_FEATURE, "share.version", TRANSACTION_VERSION_FEATURE]
    assert [f.name for f in answers.answer(publisher, 3).finalized_features] == ["share.version"]


def test_the_finalized_levels_and_epoch_follow_the_image_and_are_cached_between_images():
    publisher = MetadataPublisher()
    answers = ApiVersionsAnswers(build_response(TABLE))
    _publish(publisher, [FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=METADATA_VERSION)], 3)
    first = answers.answer(publisher)
    assert [(f.name, f.min_version_level, f.max_version_level) for f in first.finalized_features] == [
        (METADATA_VERSION_FEATURE, METADATA_VERSION, METADATA_VERSION)
    ]
    assert first.finalized_features_epoch == 3
    assert answers.answer(publisher) is first  # same image, same answer object
    # A feature at level 0 is off: not listed as finalized.
    _publish(publisher, [FeatureLevelRecord(name="group.version", feature_level=0)], 9)
    second = answers.answer(publisher)
    assert second is not first and second.finalized_features_epoch == 9
    assert [f.name for f in second.finalized_features] == [METADATA_VERSION_FEATURE]
    assert publisher.image is not EMPTY_IMAGE


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_the_featured_answer_encodes_at_every_version(version):
    publisher = MetadataPublisher()
    _publish(publisher, [FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=METADATA_VERSION)], 5)
    answer = ApiVersionsAnswers(build_response(TABLE)).answer(publisher)
    client, server = ClientConnection(client_id="t"), ServerConnection()
    correlation, frame = client.send_request(REQUESTS[18](), version)
    (event,) = server.receive_data(frame)
    (got,) = client.receive_data(b"".join(server.send_response(event.header, answer)))
    body = got.response
    assert [k.api_key for k in body.api_keys] == [0, 18]
    if version >= 3:
        assert [f.name for f in body.finalized_features] == [METADATA_VERSION_FEATURE]
        assert body.finalized_features_epoch == 5
