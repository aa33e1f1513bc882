"""The controller's view of SCRAM users (Kafka's ScramControlManager).

SCRAM credentials live in the metadata log (UserScramCredentialRecord: salt, StoredKey, ServerKey,
iterations; never the password; RemoveUserScramCredentialRecord deletes one user's mechanism).
AlterUserScramCredentials carries the salted password the client computed; the controller derives the keys
(protocol/sasl.py). Outcomes come one per distinct user name, as Kafka's ControllerApis answers: a user
named in both a deletion and an upsertion of the same mechanism (or twice in either), an unknown mechanism,
an empty name, salt or salted password, iterations outside 4096..16384, or the deletion of a credential that
does not exist fail that user only, and then none of that user's changes is written.
"""

from __future__ import annotations

from collections.abc import Sequence

from odradek.protocol.errors import ErrorCode
from odradek.protocol.sasl import MAX_ITERATIONS, MIN_ITERATIONS, ScramMechanism, credential_from_salted_password
from odradek.metadata.image import MetadataImage
from odradek.metadata.records import RemoveUserScramCredentialRecord, UserScramCredentialRecord

_MECHANISM_IDS = {int(m) for m in ScramMechanism}

ScramOutcome = dict[str, tuple[int, str | None]]
"""Each user's (error code, message): (0, None) for a user whose changes are written."""


class ScramControlManager:
    """See the module doc."""

    def alter_user_scram_credentials(
        self, image: MetadataImage, deletions: Sequence, upsertions: Sequence
    ) -> tuple[list, ScramOutcome]:
        """The records for a request's deletions and upsertions (AlterUserScramCredentialsRequest's) against
        `image`, and each user's outcome."""
        outcome: ScramOutcome = {}
        users = list(dict.fromkeys([d.name for d in deletions] + [u.name for u in upsertions]))
        seen: dict[tuple[str, int], int] = {}
        for item in [*deletions, *upsertions]:
            seen[(item.name, item.mechanism)] = seen.get((item.name, item.mechanism), 0) + 1

        def fail(name: str, code: ErrorCode, message: str) -> None:
            outcome.setdefault(name, (int(code), message))

        for item in [*deletions, *upsertions]:
            if not item.name:
                fail(item.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
            elif item.mechanism not in _MECHANISM_IDS:
                fail(item.name, ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {item.mechanism}")
            elif seen[(item.name, item.mechanism)] > 1:
                fail(item.name, ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
        for d in deletions:
            if d.name not in outcome and (d.name, d.mechanism) not in image.scram_credentials:
                fail(d.name, ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
        for u in upsertions:
            if u.name in outcome:
                continue
            if not MIN_ITERATIONS <= u.iterations <= MAX_ITERATIONS:
                fail(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL,
                     f"Iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")
            elif not u.salt or not u.salted_password:
                fail(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
        records = []
        for d in deletions:
            if d.name not in outcome:
                records.append(RemoveUserScramCredentialRecord(name=d.name, mechanism=d.mechanism))
        for u in upsertions:
            if u.name not in outcome:
                c = credential_from_salted_password(
                    ScramMechanism(u.mechanism), bytes(u.salted_password), bytes(u.salt), u.iterations
                )
                records.append(UserScramCredentialRecord(name=u.name, mechanism=u.mechanism, salt=c.salt,
                                                         stored_key=c.stored_key, server_key=c.server_key,
                                                         iterations=c.iterations))
        for name in users:
            outcome.setdefault(name, (0, None))
        # Kafka applies a user's changes only if all of them are acceptable: drop the records of failed users.
        failed = {name for name, (code, _) in outcome.items() if code}
        return [r for r in records if r.name not in failed], outcome
