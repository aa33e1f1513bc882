"""The controller's view of the ACLs (Kafka's AclControlManager).

A binding is created by an AccessControlEntryRecord with a new random id (the id is what a later removal
names) and deleted by a RemoveAccessControlEntryRecord per binding a filter matches. Creating a binding
equal to one that exists writes nothing, as Kafka's does. The image keeps the bindings by id (metadata/acl.py
validates bindings and filters and indexes them); the authorizer reads them from there.
"""

from __future__ import annotations

import random

from odradek.protocol.errors import ErrorCode
from odradek.metadata.acl import AclError, AclIndex, validate_binding
from odradek.metadata.image import MetadataError, MetadataImage, random_uuid
from odradek.metadata.records import AccessControlEntryRecord, RemoveAccessControlEntryRecord


class AclControlManager:
    """See the module doc. `rng` draws the binding ids."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def create_acl(self, image: MetadataImage, binding) -> tuple[list, None]:
        """An AccessControlEntryRecord for `binding` (an AclBinding), none if an equal one exists."""
        try:
            validate_binding(binding)
        except AclError as e:
            raise MetadataError(ErrorCode.INVALID_REQUEST, str(e)) from None
        if binding in image.acls.values():
            return [], None
        return [AccessControlEntryRecord(
            id=random_uuid(self._rng), resource_type=binding.resource_type, resource_name=binding.resource_name,
            pattern_type=binding.pattern_type, principal=binding.principal, host=binding.host,
            operation=binding.operation, permission_type=binding.permission_type,
        )], None

    def delete_acls(self, image: MetadataImage, acl_filter) -> tuple[list, list]:
        """RemoveAccessControlEntryRecords for every binding `acl_filter` (an AclFilter) matches; the bindings."""
        try:
            acl_filter.validate()
        except AclError as e:
            raise MetadataError(ErrorCode.INVALID_REQUEST, str(e)) from None
        matched = AclIndex(image.acls).matching(acl_filter)
        return [RemoveAccessControlEntryRecord(id=i) for i, _ in matched], [b for _, b in matched]
