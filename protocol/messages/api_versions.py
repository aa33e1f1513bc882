"""ApiVersions (18): the handshake every client sends first.

Its response header is always v0, and a request at a version we do not know is answered with a v0 body
carrying UNSUPPORTED_VERSION; both quirks live in `protocol.headers` and `protocol.connection`.
"""

from ..schema import F, api

API_VERSIONS = api(
    18,
    "ApiVersions",
    valid="0-4",
    flexible="3+",
    request=[
        F("client_software_name", "string", "3+", ignorable=True),
        F("client_software_version", "string", "3+", ignorable=True),
    ],
    response=[
        F("error_code", "int16"),
        F("api_keys", "[]ApiVersion", fields=[
            F("api_key", "int16"),
            F("min_version", "int16"),
            F("max_version", "int16"),
        ]),
        F("throttle_time_ms", "int32", "1+", ignorable=True),
        F("supported_features", "[]SupportedFeatureKey", "3+", ignorable=True, tag=0, fields=[
            F("name", "string", "3+"),
            F("min_version", "int16", "3+"),
            F("max_version", "int16", "3+"),
        ]),
        F("finalized_features_epoch", "int64", "3+", default=-1, ignorable=True, tag=1),
        F("finalized_features", "[]FinalizedFeatureKey", "3+", ignorable=True, tag=2, fields=[
            F("name", "string", "3+"),
            F("max_version_level", "int16", "3+"),
            F("min_version_level", "int16", "3+"),
        ]),
        F("zk_migration_ready", "bool", "3+", default=False, ignorable=True, tag=3),
    ],
)

APIS = [API_VERSIONS]
