"""Share group APIs (KIP-932) on the group side, handed to the group coordinator (coordinator/group/share.py).

ShareGroupHeartbeat (76) and ShareGroupDescribe (77), and the share admin APIs DescribeShareGroupOffsets
(90), AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92), which read and change share-partition
state through the broker's persister (broker/share/persister.py). All are behind the SHARE gate
(`odradek.share.enabled`, handlers/__init__): off, none is served or advertised.

Authorization is Kafka 4.4's (KafkaApis):
- ShareGroupHeartbeat: READ on the group (GROUP_AUTHORIZATION_FAILED), then DESCRIBE on every subscribed
  topic (TOPIC_AUTHORIZATION_FAILED, naming the topics), as for a KIP-848 consumer.
- ShareGroupDescribe: DESCRIBE on each group; a group whose members are assigned a topic the principal may
  not describe is answered TOPIC_AUTHORIZATION_FAILED rather than leak the topic.
- DescribeShareGroupOffsets: DESCRIBE on the group, DESCRIBE on each topic (per partition).
- AlterShareGroupOffsets: READ on the group, READ on each topic (per partition).
- DeleteShareGroupOffsets: DELETE on the group, READ on each topic (per partition).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.metadata.acl import AclOperation, ResourceType
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import ShareGroupDescribeResponse, ShareGroupHeartbeatResponse

from ..authorizer import per_item
from . import SHARE, Answer, handles
from .groups import _client_host, _client_id, _own_operations, respond

if TYPE_CHECKING:
    from odradek.protocol.messages import ShareGroupDescribeRequest, ShareGroupHeartbeatRequest

    from ..context import RequestContext
    from ..services import BrokerServices

READ, DESCRIBE, GROUP, TOPIC = AclOperation.READ, AclOperation.DESCRIBE, ResourceType.GROUP, ResourceType.TOPIC
_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED


@handles(76, (1, 1), gate=SHARE)
def handle_share_group_heartbeat(services: BrokerServices, ctx: RequestContext,
                                 request: ShareGroupHeartbeatRequest) -> Answer:
    if not services.authorized(ctx, READ, GROUP, request.group_id):
        return ShareGroupHeartbeatResponse(error_code=_DENIED)
    if services.authorizer is not None and request.subscribed_topic_names:
        names = list(dict.fromkeys(request.subscribed_topic_names))
        allowed = services.authorized_names(ctx, DESCRIBE, TOPIC, names)
        refused = [n for n in names if n not in allowed]
        if refused:
            return ShareGroupHeartbeatResponse(
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                error_message=f"The member is not authorized to describe the topics {', '.join(sorted(refused))}.")
    return respond(services, services.groups.share_group_heartbeat(request, services.now_ms(), _client_id(ctx),
                                                                   _client_host(ctx)))


def _describe_refusal(services: BrokerServices, ctx: RequestContext, group_id: str):
    return None if services.authorized(ctx, DESCRIBE, GROUP, group_id) else _DENIED


@handles(77, (1, 1), gate=SHARE)
@per_item("group_ids", "groups", _describe_refusal,
          lambda g, code, version: ShareGroupDescribeResponse.DescribedGroup(error_code=int(code), group_id=g))
def handle_share_group_describe(services: BrokerServices, ctx: RequestContext,
                                request: ShareGroupDescribeRequest) -> Answer:
    response = _own_operations(services, ctx, services.groups.share_group_describe(request, services.now_ms()))
    if services.authorizer is not None:
        for group in response.groups:
            names = {tp.topic_name for m in group.members for tp in m.assignment.topic_partitions}
            if names and len(services.authorized_names(ctx, DESCRIBE, TOPIC, sorted(names))) < len(names):
                response.groups[response.groups.index(group)] = ShareGroupDescribeResponse.DescribedGroup(
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, group_id=group.group_id,
                    error_message="The described group uses topics that the client is not authorized to describe.")
    return response
