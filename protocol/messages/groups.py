"""Classic group coordination: FindCoordinator (10), JoinGroup to ListGroups (11-16), DeleteGroups (42)."""

from ..schema import F, api

FIND_COORDINATOR = api(
    10,
    "FindCoordinator",
    valid="0-6",
    flexible="3+",
    request=[
        # v0-3 look up one key; v4+ batch them in coordinator_keys and answer per key in `coordinators`.
        F("key", "string", "0-3"),
        F("key_type", "int8", "1+", default=0),
        F("coordinator_keys", "[]string", "4+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+", ignorable=True),
        F("error_code", "int16", "0-3"),
        F("error_message", "string", "1-3", nullable="1-3", ignorable=True),
        F("node_id", "int32", "0-3"),
        F("host", "string", "0-3"),
        F("port", "int32", "0-3"),
        F("coordinators", "[]Coordinator", "4+", fields=[
            F("key", "string", "4+"),
            F("node_id", "int32", "4+"),
            F("host", "string", "4+"),
            F("port", "int32", "4+"),
            F("error_code", "int16", "4+"),
            F("error_message", "string", "4+", nullable="4+", ignorable=True),
        ]),
    ],
)

# v0-1 stay in the table: old librdkafka probes JoinGroup's version range to detect broker features.
# From v4 on, a join with an empty member_id is answered with MEMBER_ID_REQUIRED and a freshly assigned
# member_id; the client must join again with it.
JOIN_GROUP = api(
    11,
    "JoinGroup",
    valid="0-9",
    flexible="6+",
    request=[
        F("group_id", "string"),
        F("session_timeout_ms", "int32"),
        # Absent in v0: the session timeout doubles as the rebalance timeout there; -1 is only a placeholder.
        F("rebalance_timeout_ms", "int32", "1+", default=-1, ignorable=True),
        F("member_id", "string"),
        F("group_instance_id", "string", "5+", nullable="5+", default=None),
        F("protocol_type", "string"),
        F("protocols", "[]JoinGroupRequestProtocol", fields=[
            F("name", "string"),
            F("metadata", "bytes"),
        ]),
        F("reason", "string", "8+", nullable="8+", default=None, ignorable=True),
    ],
    response=[
        F("throttle_time_ms", "int32", "2+", ignorable=True),
        F("error_code", "int16"),
        F("generation_id", "int32", default=-1),
        F("protocol_type", "string", "7+", nullable="7+", default=None, ignorable=True),
        F("protocol_name", "string", nullable="7+"),
        F("leader", "string"),
        F("skip_assignment", "bool", "9+", default=False),
        F("member_id", "string"),
        F("members", "[]JoinGroupResponseMember", fields=[
            F("member_id", "string"),
            F("group_instance_id", "string", "5+", nullable="5+", default=None, ignorable=True),
            F("metadata", "bytes"),
        ]),
    ],
)

HEARTBEAT = api(
    12,
    "Heartbeat",
    valid="0-4",
    flexible="4+",
    request=[
        F("group_id", "string"),
        F("generation_id", "int32"),
        F("member_id", "string"),
        F("group_instance_id", "string", "3+", nullable="3+", default=None),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+", ignorable=True),
        F("error_code", "int16"),
    ],
)

LEAVE_GROUP = api(
    13,
    "LeaveGroup",
    valid="0-5",
    flexible="4+",
    request=[
        F("group_id", "string"),
        # v0-2 name one member; v3+ may remove several (static members by instance id) in one request.
        F("member_id", "string", "0-2"),
        F("members", "[]MemberIdentity", "3+", fields=[
            F("member_id", "string", "3+"),
            F("group_instance_id", "string", "3+", nullable="3+", default=None),
            F("reason", "string", "5+", nullable="5+", default=None, ignorable=True),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+", ignorable=True),
        F("error_code", "int16"),
        F("members", "[]MemberResponse", "3+", fields=[
            F("member_id", "string", "3+"),
            F("group_instance_id", "string", "3+", nullable="3+"),
            F("error_code", "int16", "3+"),
        ]),
    ],
)

SYNC_GROUP = api(
    14,
    "SyncGroup",
    valid="0-5",
    flexible="4+",
    request=[
        F("group_id", "string"),
        F("generation_id", "int32"),
        F("member_id", "string"),
        F("group_instance_id", "string", "3+", nullable="3+", default=None),
        F("protocol_type", "string", "5+", nullable="5+", default=None, ignorable=True),
        F("protocol_name", "string", "5+", nullable="5+", default=None, ignorable=True),
        F("assignments", "[]SyncGroupRequestAssignment", fields=[
            F("member_id", "string"),
            F("assignment", "bytes"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+", ignorable=True),
        F("error_code", "int16"),
        F("protocol_type", "string", "5+", nullable="5+", default=None, ignorable=True),
        F("protocol_name", "string", "5+", nullable="5+", default=None, ignorable=True),
        F("assignment", "bytes"),
    ],
)

DESCRIBE_GROUPS = api(
    15,
    "DescribeGroups",
    valid="0-6",
    flexible="5+",
    request=[
        F("groups", "[]string"),
        F("include_authorized_operations", "bool", "3+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+", ignorable=True),
        F("groups", "[]DescribedGroup", fields=[
            F("error_code", "int16"),
            # v6+ answers an unknown group with GROUP_ID_NOT_FOUND; older versions describe it as Dead.
            F("error_message", "string", "6+", nullable="6+", default=None),
            F("group_id", "string"),
            F("group_state", "string"),
            F("protocol_type", "string"),
            F("protocol_data", "string"),
            F("members", "[]DescribedGroupMember", fields=[
                F("member_id", "string"),
                F("group_instance_id", "string", "4+", nullable="4+", default=None, ignorable=True),
                F("client_id", "string"),
                F("client_host", "string"),
                F("member_metadata", "bytes"),
                F("member_assignment", "bytes"),
            ]),
            # INT32_MIN means "not requested", distinct from an empty bit set.
            F("authorized_operations", "int32", "3+", default=-2147483648),
        ]),
    ],
)

LIST_GROUPS = api(
    16,
    "ListGroups",
    valid="0-5",
    flexible="3+",
    request=[
        F("states_filter", "[]string", "4+"),
        F("types_filter", "[]string", "5+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+", ignorable=True),
        F("error_code", "int16"),
        F("groups", "[]ListedGroup", fields=[
            F("group_id", "string"),
            F("protocol_type", "string"),
            F("group_state", "string", "4+", ignorable=True),
            F("group_type", "string", "5+", ignorable=True),
        ]),
    ],
)

DELETE_GROUPS = api(
    42,
    "DeleteGroups",
    valid="0-2",
    flexible="2+",
    request=[
        F("groups_names", "[]string"),  # sic: Kafka's name is GroupsNames
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]DeletableGroupResult", fields=[
            F("group_id", "string"),
            F("error_code", "int16"),
        ]),
    ],
)

APIS = [FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS]
