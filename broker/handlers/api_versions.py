"""ApiVersions (18): the table is derived from the registered handlers (see handlers/__init__)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.protocol.messages import ApiVersionsResponse

from . import BROKER, CONTROLLER, Answer, handles

if TYPE_CHECKING:
    from odradek.protocol.messages import ApiVersionsRequest
    from ..context import RequestContext
    from ..services import BrokerServices


def build_response(table: dict[int, tuple[int, int]]) -> ApiVersionsResponse:
    keys = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(table.items())]
    return ApiVersionsResponse(error_code=0, api_keys=keys, throttle_time_ms=0)


@handles(18, listeners=(BROKER, CONTROLLER))
def handle_api_versions(services: BrokerServices, ctx: RequestContext, request: ApiVersionsRequest) -> Answer:
    """Each kind of listener lists what it serves: the broker listeners the client APIs, the controller
    listeners the quorum's and the brokers' RPCs."""
    if ctx.connection.scope == CONTROLLER:
        return services.controller_api_versions_response
    return services.api_versions_response
