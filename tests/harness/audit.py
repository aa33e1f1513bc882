"""The authorizer's audit log as tests read it: an Authorizer over a handful of ACL bindings, a request
context for a principal, and the `audit_lines` fixture (the broker's log as JSON lines at INFO)."""

from __future__ import annotations

import io
import json
import logging
import uuid
from types import SimpleNamespace

import pytest
import structlog

from odradek.broker.authorizer import AUDIT_LOGGER, Authorizer
from odradek.broker.context import ConnectionContext, KafkaPrincipal, RequestContext
from odradek.broker.logging import configure_logging
from odradek.protocol.headers import RequestHeader


def authorizer(*bindings) -> Authorizer:
    config = SimpleNamespace(super_users=["User:admin"], allow_everyone_if_no_acl_found=False, authorizer_class_name="x")
    acls = {uuid.UUID(int=i + 1): b for i, b in enumerate(bindings)}
    return Authorizer(config, SimpleNamespace(image=SimpleNamespace(acls=acls)))


def context(principal: str, api_key: int = 19) -> RequestContext:
    connection = ConnectionContext("c1", "10.0.0.7", "CLIENT", principal=KafkaPrincipal(*principal.split(":")))
    return RequestContext(RequestHeader(api_key, 7, 1, "app"), None, connection, 0, 10)


@pytest.fixture
def audit_lines():
    """The broker's log rendered as JSON lines at INFO, as `odradek broker start` configures it."""
    buf = io.StringIO()
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    audit = logging.getLogger(AUDIT_LOGGER)
    audit_level = audit.level
    try:
        configure_logging("json", "INFO", stream=buf)
        yield lambda: [json.loads(line) for line in buf.getvalue().splitlines()]
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
        audit.setLevel(audit_level)
        logging.captureWarnings(False)
        structlog.reset_defaults()
