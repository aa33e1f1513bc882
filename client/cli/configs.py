"""`odradek config get|set` of topics, brokers, groups and broker loggers, as kafka-configs.sh.

A broker is named by its node id (`config set broker 2 message.max.bytes=2000000`: that node's dynamic
config, DYNAMIC_BROKER_CONFIG) or `default` for the cluster-wide default every broker takes
(kafka-configs.sh's `--entity-default`, an empty resource name on the wire: DYNAMIC_DEFAULT_BROKER_CONFIG).
Only the keys a broker applies at run time can be set; the broker's refusal names the others."""

from __future__ import annotations

import argparse

from .common import EXIT_OK, Output, SubParsers, UsageError, key_value
from .properties import admin_for


def register(sub: SubParsers) -> None:
    """`config get|set`."""
    csub = SubParsers(sub.add("config", help="read and change topic, broker and group configs"), "action")
    p = csub.add("get", handler=config_get, help="show configs")
    p.add_argument("resource_type", type=_resource_type, metavar="{topic,broker,group,broker-logger}")
    p.add_argument("name", help="topic or group name, broker node id, or `default` for the cluster-wide broker defaults")
    p.add_argument("keys", nargs="*")
    p.add_argument("--all", action="store_true", help="include defaults")
    p = csub.add("set", handler=config_set, help="set or delete configs (incremental)")
    p.add_argument("resource_type", type=_resource_type, metavar="{topic,broker,group,broker-logger}")
    p.add_argument("name", help="topic or group name, broker node id, or `default` for the cluster-wide broker defaults")
    p.add_argument("pairs", nargs="*", type=key_value, metavar="KEY=VALUE")
    p.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V...]",
                   help="kafka-configs.sh's spelling of KEY=VALUE pairs")
    p.add_argument("--delete", "--delete-config", action="append", default=[], metavar="KEY")


_RESOURCE_TYPES = {"topic": "topic", "topics": "topic", "broker": "broker", "brokers": "broker",
                   "group": "group", "groups": "group", "broker-logger": "broker_logger", "broker-loggers": "broker_logger"}


def _resource_type(text: str) -> str:
    """topic, broker, group or broker-logger (a node's loggers and their levels); kafka-configs.sh's plural
    entity types too."""
    try:
        return _RESOURCE_TYPES[text]
    except KeyError:
        raise argparse.ArgumentTypeError(f"expected topic, broker, group or broker-logger, got {text!r}") from None


def _name(args: argparse.Namespace) -> str:
    """The resource name on the wire: a broker's `default` is the cluster-wide defaults' empty name."""
    if args.resource_type == "broker" and args.name in ("default", "<default>"):
        return ""
    return args.name


async def config_get(args: argparse.Namespace, out: Output) -> int:
    async with admin_for(args) as admin:
        entries = await admin.describe_configs(args.resource_type, _name(args), args.keys or None)
    if not args.all and not args.keys:
        entries = [e for e in entries if not e.is_default]
    if out.json:
        out.emit_json({e.name: {"value": e.value, "source": e.source, "read_only": e.read_only,
                                "sensitive": e.is_sensitive} for e in entries})
    else:
        out.table(["NAME", "VALUE", "SOURCE"], [[e.name, "(sensitive)" if e.is_sensitive else e.value, e.source]
                                                for e in entries])
    return EXIT_OK


async def config_set(args: argparse.Namespace, out: Output) -> int:
    changes: dict[str, str | None] = dict(args.pairs)
    changes.update({k: None for k in args.delete})
    if not changes:
        raise UsageError("nothing to set: give KEY=VALUE pairs or --delete KEY")
    async with admin_for(args) as admin:
        await admin.alter_configs(args.resource_type, _name(args), changes)
    if out.json:
        out.emit_json({"resource": args.resource_type, "name": args.name, "changes": changes})
    else:
        out.line(f"updated {args.resource_type} {args.name}: " +
                 ", ".join(f"{k}={v}" if v is not None else f"-{k}" for k, v in changes.items()))
    return EXIT_OK
