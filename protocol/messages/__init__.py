"""The registry of every message definition, one module per API family.

Each module defines `APIS`, a list of `schema.Api`. They are collected here in module-name order.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

from ..schema import Api


def _collect() -> tuple[list[Api], list[Api]]:
    apis: list[Api] = []
    data: list[Api] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        apis.extend(getattr(module, "APIS", []))
        data.extend(getattr(module, "DATA", []))
    return sorted(apis, key=lambda a: a.key), data


ALL_APIS, _DATA = _collect()
BY_KEY: dict[int, Api] = {}
for _api in ALL_APIS:
    if _api.key in BY_KEY:
        raise RuntimeError(f"api key {_api.key} defined twice: {BY_KEY[_api.key].name} and {_api.name}")
    BY_KEY[_api.key] = _api

# Message classes: `ProduceRequest`, `ProduceResponse`, ... importable from this package.
from ..codec import build_message_classes, data_class  # noqa: E402

# (type[Any]: Message subclasses whose fields and nested classes a type checker cannot see; see the end)
REQUESTS: dict[int, type[Any]] = {}
RESPONSES: dict[int, type[Any]] = {}
for _api in ALL_APIS:
    REQUESTS[_api.key], RESPONSES[_api.key] = build_message_classes(_api)
    globals()[REQUESTS[_api.key].__name__] = REQUESTS[_api.key]
    globals()[RESPONSES[_api.key].__name__] = RESPONSES[_api.key]
del _api

# Versioned payloads that are not API messages (e.g. ConsumerProtocolSubscription).
DATA_CLASSES: dict[str, type] = {}
for _d in _DATA:
    DATA_CLASSES[_d.name] = data_class(_d.name, _d.request, valid=_d.valid, flexible=_d.flexible)
    globals()[_d.name] = DATA_CLASSES[_d.name]
del _d

if TYPE_CHECKING:
    # The classes above are built from the schemas at import, so a type checker cannot see them: to it,
    # `ProduceRequest` and the rest are Any (PEP 562's module __getattr__). A misspelt name still fails at
    # import, and the message tests cover every field of every version.
    def __getattr__(name: str) -> Any: ...
