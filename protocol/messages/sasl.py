"""SASL and SCRAM: SaslHandshake (17), SaslAuthenticate (36), DescribeUserScramCredentials (50), AlterUserScramCredentials (51)."""

from ..schema import F, api

# Never flexible. After a v0 handshake the SASL tokens follow as raw length-prefixed frames, not as
# SaslAuthenticate requests; only a v1 handshake moves the exchange into SaslAuthenticate.
SASL_HANDSHAKE = api(
    17,
    "SaslHandshake",
    valid="0-1",
    flexible="none",
    request=[
        F("mechanism", "string"),
    ],
    response=[
        F("error_code", "int16"),
        F("mechanisms", "[]string"),
    ],
)

SASL_AUTHENTICATE = api(
    36,
    "SaslAuthenticate",
    valid="0-2",
    flexible="2+",
    request=[
        F("auth_bytes", "bytes"),
    ],
    response=[
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("auth_bytes", "bytes"),
        F("session_lifetime_ms", "int64", "1+", default=0, ignorable=True),
    ],
)

DESCRIBE_USER_SCRAM_CREDENTIALS = api(
    50,
    "DescribeUserScramCredentials",
    valid="0",
    flexible="0+",
    request=[
        F("users", "[]UserName", nullable="0+", fields=[
            F("name", "string"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("results", "[]DescribeUserScramCredentialsResult", fields=[
            F("user", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("credential_infos", "[]CredentialInfo", fields=[
                F("mechanism", "int8"),
                F("iterations", "int32"),
            ]),
        ]),
    ],
)

ALTER_USER_SCRAM_CREDENTIALS = api(
    51,
    "AlterUserScramCredentials",
    valid="0",
    flexible="0+",
    request=[
        F("deletions", "[]ScramCredentialDeletion", fields=[
            F("name", "string"),
            F("mechanism", "int8"),
        ]),
        F("upsertions", "[]ScramCredentialUpsertion", fields=[
            F("name", "string"),
            F("mechanism", "int8"),
            F("iterations", "int32"),
            F("salt", "bytes"),
            F("salted_password", "bytes"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]AlterUserScramCredentialsResult", fields=[
            F("user", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
        ]),
    ],
)

APIS = [SASL_HANDSHAKE, SASL_AUTHENTICATE, DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS]
