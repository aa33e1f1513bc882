"""Access control lists: DescribeAcls (29), CreateAcls (30), DeleteAcls (31)."""

from ..schema import F, api

DESCRIBE_ACLS = api(
    29,
    "DescribeAcls",
    valid="1-3",
    flexible="2+",
    request=[
        F("resource_type_filter", "int8"),
        F("resource_name_filter", "string", nullable="0+"),
        F("pattern_type_filter", "int8", "1+", default=3),
        F("principal_filter", "string", nullable="0+"),
        F("host_filter", "string", nullable="0+"),
        F("operation", "int8"),
        F("permission_type", "int8"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("resources", "[]DescribeAclsResource", fields=[
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("pattern_type", "int8", "1+", default=3),
            F("acls", "[]AclDescription", fields=[
                F("principal", "string"),
                F("host", "string"),
                F("operation", "int8"),
                F("permission_type", "int8"),
            ]),
        ]),
    ],
)

CREATE_ACLS = api(
    30,
    "CreateAcls",
    valid="1-3",
    flexible="2+",
    request=[
        F("creations", "[]AclCreation", fields=[
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("resource_pattern_type", "int8", "1+", default=3),
            F("principal", "string"),
            F("host", "string"),
            F("operation", "int8"),
            F("permission_type", "int8"),
        ]),
    ],
    # Results are positional: exactly one per creation, in request order.
    response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]AclCreationResult", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
        ]),
    ],
)

DELETE_ACLS = api(
    31,
    "DeleteAcls",
    valid="1-3",
    flexible="2+",
    request=[
        F("filters", "[]DeleteAclsFilter", fields=[
            F("resource_type_filter", "int8"),
            F("resource_name_filter", "string", nullable="0+"),
            F("pattern_type_filter", "int8", "1+", default=3),
            F("principal_filter", "string", nullable="0+"),
            F("host_filter", "string", nullable="0+"),
            F("operation", "int8"),
            F("permission_type", "int8"),
        ]),
    ],
    # Results are positional: exactly one per filter, in request order.
    response=[
        F("throttle_time_ms", "int32"),
        F("filter_results", "[]DeleteAclsFilterResult", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("matching_acls", "[]DeleteAclsMatchingAcl", fields=[
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+"),
                F("resource_type", "int8"),
                F("resource_name", "string"),
                F("pattern_type", "int8", "1+", default=3),
                F("principal", "string"),
                F("host", "string"),
                F("operation", "int8"),
                F("permission_type", "int8"),
            ]),
        ]),
    ],
)

APIS = [DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS]
