"""Config resources: DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44), ListConfigResources (74)."""

from ..schema import F, api

DESCRIBE_CONFIGS = api(
    32,
    "DescribeConfigs",
    valid="1-4",
    flexible="4+",
    request=[
        F("resources", "[]DescribeConfigsResource", fields=[
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configuration_keys", "[]string", nullable="0+"),
        ]),
        F("include_synonyms", "bool", "1+", default=False),
        F("include_documentation", "bool", "3+", default=False),
    ],
    # Every requested resource must come back, in request order; librdkafka aborts on a missing one.
    response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]DescribeConfigsResult", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configs", "[]DescribeConfigsResourceResult", fields=[
                F("name", "string"),
                F("value", "string", nullable="0+"),
                F("read_only", "bool"),
                F("config_source", "int8", "1+", default=-1, ignorable=True),
                F("is_default", "bool", "0"),
                F("is_sensitive", "bool"),
                F("synonyms", "[]DescribeConfigsSynonym", "1+", ignorable=True, fields=[
                    F("name", "string", "1+"),
                    F("value", "string", "1+", nullable="0+"),
                    F("source", "int8", "1+"),
                ]),
                F("config_type", "int8", "3+", default=0, ignorable=True),
                F("documentation", "string", "3+", nullable="0+", ignorable=True),
            ]),
        ]),
    ],
)

ALTER_CONFIGS = api(
    33,
    "AlterConfigs",
    valid="0-2",
    flexible="2+",
    request=[
        F("resources", "[]AlterConfigsResource", fields=[
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configs", "[]AlterableConfig", fields=[
                F("name", "string"),
                F("value", "string", nullable="0+"),
            ]),
        ]),
        F("validate_only", "bool"),
    ],
    # As with DescribeConfigs, answer every requested resource.
    response=[
        F("throttle_time_ms", "int32"),
        F("responses", "[]AlterConfigsResourceResponse", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("resource_type", "int8"),
            F("resource_name", "string"),
        ]),
    ],
)

INCREMENTAL_ALTER_CONFIGS = api(
    44,
    "IncrementalAlterConfigs",
    valid="0-1",
    flexible="1+",
    request=[
        F("resources", "[]AlterConfigsResource", fields=[
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configs", "[]AlterableConfig", fields=[
                F("name", "string"),
                F("config_operation", "int8"),
                F("value", "string", nullable="0+"),
            ]),
        ]),
        F("validate_only", "bool"),
    ],
    # As with DescribeConfigs, answer every requested resource.
    response=[
        F("throttle_time_ms", "int32"),
        F("responses", "[]AlterConfigsResourceResponse", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("resource_type", "int8"),
            F("resource_name", "string"),
        ]),
    ],
)

LIST_CONFIG_RESOURCES = api(
    74,
    "ListConfigResources",
    valid="0-1",
    flexible="0+",
    request=[
        F("resource_types", "[]int8", "1+"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("config_resources", "[]ConfigResource", fields=[
            F("resource_name", "string"),
            # v0 only listed client-metrics subscriptions, hence the default type 16 (CLIENT_METRICS).
            F("resource_type", "int8", "1+", default=16, ignorable=True),
        ]),
    ],
)

APIS = [DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS, LIST_CONFIG_RESOURCES]
