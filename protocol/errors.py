"""Errors of the protocol layer, and (below) Kafka's error codes.

Blame is explicit, as in h11: `RemoteProtocolError` means the peer sent something we cannot accept (close
the connection or answer with an error); `LocalProtocolError` means our own code misused the API (a bug).
"""

from __future__ import annotations


class ProtocolError(Exception):
    """Base of every protocol-layer error."""


class RemoteProtocolError(ProtocolError):
    """The peer sent malformed or unacceptable bytes. The connection should be closed."""


class LocalProtocolError(ProtocolError):
    """Our own code asked for something the protocol cannot express (e.g. a field absent in a version)."""


class CorruptRecordError(RemoteProtocolError):
    """A record batch failed validation (layout, magic, length or CRC): Kafka's CORRUPT_MESSAGE."""


class RecordTooLargeError(RemoteProtocolError):
    """Decompression would exceed the configured bound."""


class UnsupportedApiError(RemoteProtocolError):
    """A request for an API this server does not serve (unknown to Kafka, or not served yet). Kafka closes
    the connection on an unknown key too; the fields let the server say which API a client wanted."""

    def __init__(self, api_key: int, api_version: int, api_name: str, client_id: str | None) -> None:
        super().__init__(f"unknown or unsupported api key {api_key} ({api_name})")
        self.api_key = api_key
        self.api_version = api_version
        self.api_name = api_name
        self.client_id = client_id


# ---------------------------------------------------------------------------------------------------
# Kafka's error codes (Kafka 4.x, codes -1 to 133). The names and numbers are the protocol's; the names
# are Kafka's own, so that logs and tests read the same as Kafka's documentation.

from enum import IntEnum  # noqa: E402  (kept beside the enum it serves; the file above is append-only)


class _CodeSet:
    """A set of error codes seen two ways: the frozenset on the enum class, membership on a member."""

    def __init__(self, global_name: str):
        self._global_name = global_name

    def __get__(self, member, owner=None):
        codes = globals()[self._global_name]
        return codes if member is None else member in codes


class ErrorCode(IntEnum):
    """A Kafka error code. `retriable` and `invalid_metadata` follow the Java client's exception classes."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    INVALID_REGULAR_EXPRESSION = 128
    REBOOTSTRAP_REQUIRED = 129
    STREAMS_INVALID_TOPOLOGY = 130
    STREAMS_INVALID_TOPOLOGY_EPOCH = 131
    STREAMS_TOPOLOGY_FENCED = 132
    SHARE_SESSION_LIMIT_REACHED = 133

    # On the class these are the frozensets of codes; on a member, whether the member is in the set:
    # `ErrorCode.retriable` is a frozenset, `ErrorCode.NOT_COORDINATOR.retriable` is True.
    retriable = _CodeSet("RETRIABLE_ERRORS")  # Kafka's exception is a RetriableException
    invalid_metadata = _CodeSet("INVALID_METADATA_ERRORS")  # refresh metadata before retrying

    @classmethod
    def for_code(cls, code: int) -> ErrorCode:
        """The member for a wire code; an unknown code maps to UNKNOWN_SERVER_ERROR, as in Kafka's clients."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN_SERVER_ERROR


# Java's InvalidMetadataException subclasses (each is also a RetriableException), plus UNKNOWN_LEADER_EPOCH:
# Java makes that one a plain RetriableException ("clients need not refresh metadata"), but a stale leader
# epoch on our side is resolved by the same metadata refresh, so it is listed here on purpose.
INVALID_METADATA_ERRORS: frozenset[ErrorCode] = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.LISTENER_NOT_FOUND,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
    ErrorCode.ELECTION_NOT_NEEDED,
    ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.INCONSISTENT_TOPIC_ID,
})

# Codes whose Java exception extends RetriableException (directly or through InvalidMetadataException).
RETRIABLE_ERRORS: frozenset[ErrorCode] = INVALID_METADATA_ERRORS | frozenset({
    ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.NOT_CONTROLLER,
    ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
    ErrorCode.INVALID_FETCH_SESSION_EPOCH,
    ErrorCode.OFFSET_NOT_AVAILABLE,
    ErrorCode.UNSTABLE_OFFSET_COMMIT,
    ErrorCode.THROTTLING_QUOTA_EXCEEDED,
    ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
    ErrorCode.SHARE_SESSION_NOT_FOUND,
    ErrorCode.INVALID_SHARE_SESSION_EPOCH,
    ErrorCode.SHARE_SESSION_LIMIT_REACHED,
})


class KafkaApiError(Exception):
    """Base of every error a layer raises to be answered to a client with a Kafka error code (Kafka's
    ApiException): storage's, replication's, the metadata controller's and the coordinators' errors derive
    from it, so the broker reads `error_code` from one type instead of probing for the attribute.

    `error_code` is a class attribute where the subclass names one code, an instance attribute where the
    code is chosen at the raise (MetadataError, CoordinatorError)."""

    error_code: int = ErrorCode.UNKNOWN_SERVER_ERROR


def error_code_of(error: BaseException, default: int = ErrorCode.UNKNOWN_SERVER_ERROR) -> int:
    """The Kafka error code to answer for `error`: its own if it is a KafkaApiError, else `default`."""
    return int(error.error_code) if isinstance(error, KafkaApiError) else int(default)
