"""The controller's view of client quotas (Kafka's ClientQuotaControlManager).

AlterClientQuotas names an entity (user, client id, or both; a None name is the entity type's default)
and ops on its quota keys; each op becomes a ClientQuotaRecord (a value set, or `remove`). Entities, keys and
values are checked by metadata/quota.py, which also keeps the quotas the image replays them into. Nothing
here depends on the current image: an op on a key without a value is not an error, as in Kafka.
"""

from __future__ import annotations

from odradek.protocol.errors import ErrorCode
from odradek.metadata.image import MetadataError
from odradek.metadata.quota import QuotaError, entity_key, validate_quota_op
from odradek.metadata.records import ClientQuotaRecord


class ClientQuotaControlManager:
    """See the module doc."""

    def alter_client_quota(self, entity, ops) -> tuple[list, None]:
        """ClientQuotaRecords for one entity (pairs of entity type and name or None) and its ops
        ((key, value, remove) triples); MetadataError(INVALID_REQUEST) for a bad entity, key or value."""
        try:
            key = entity_key(entity)
            for name, value, remove in ops:
                validate_quota_op(key, name, value, remove)
        except QuotaError as e:
            raise MetadataError(ErrorCode.INVALID_REQUEST, str(e)) from None
        data = [ClientQuotaRecord.EntityData(entity_type=t, entity_name=n) for t, n in key]
        return [ClientQuotaRecord(entity=data, key=name, value=0.0 if remove else float(value), remove=remove)
                for name, value, remove in ops], None
