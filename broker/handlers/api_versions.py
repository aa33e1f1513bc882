"""ApiVersions (18): the table is derived from the registered handlers (see handlers/__init__)."""

from __future__ import annotations

from odradek.protocol.messages import ApiVersionsResponse

from . import handles


def build_response(table: dict[int, tuple[int, int]]) -> ApiVersionsResponse:
    keys = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(table.items())]
    return ApiVersionsResponse(error_code=0, api_keys=keys, throttle_time_ms=0)


@handles(18)
def handle_api_versions(services, ctx, request):
    return services.api_versions_response
