"""python -m odradek.pipeline run generate|transform|archive|replay|all [options]

Runs the reference pipeline (jobs.py) against a running broker. Examples:

    python -m odradek.pipeline run all --bootstrap 127.0.0.1:9092 --count 5000
    python -m odradek.pipeline run generate --count 100000 --rate 500      # a live feed
    python -m odradek.pipeline run transform                               # until Ctrl-C
    python -m odradek.pipeline run archive --available-now                 # e.g. from cron
    python -m odradek.pipeline run replay --source archive --logic-version 2 --target-topic fixed-events
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from odradek.client.config import BOOTSTRAP_ENV


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"{what} takes key=value (got {item!r})")
        out[key.strip()] = value.strip()
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m odradek.pipeline",
                                     description="The Odradek reference pipeline on Spark.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run one job of the pipeline, or all of them")
    jobs = run.add_subparsers(dest="job", required=True)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap", default=os.environ.get(BOOTSTRAP_ENV, "127.0.0.1:9092"),
                        help=f"broker host:port list (default: ${BOOTSTRAP_ENV} or 127.0.0.1:9092)")
    common.add_argument("--workdir", default="pipeline-work", help="checkpoints and archive (default: %(default)s)")
    common.add_argument("--raw-topic", default="raw-events")
    common.add_argument("--transformed-topic", default="transformed-events")
    common.add_argument("--aggregates-topic", default="event-aggregates")
    common.add_argument("--partitions", type=int, default=3, help="partitions of topics created here")
    common.add_argument("--raw-retention-ms", type=int, default=None, help="retention.ms of a new raw topic")
    common.add_argument("-o", "--kafka-option", action="append", default=[], metavar="KEY=VALUE",
                        help="client setting, e.g. -o linger.ms=10 (repeatable)")

    spark = argparse.ArgumentParser(add_help=False)
    spark.add_argument("--master", default=None, help="Spark master (default: spark-submit's, else local[*])")
    spark.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark setting (repeatable)")
    spark.add_argument("--max-offsets-per-trigger", type=int, default=None)
    spark.add_argument("--trigger-interval", default="5 seconds")
    spark.add_argument("--available-now", action="store_true",
                       help="process what is there, then stop (default: keep running until Ctrl-C)")

    gen = argparse.ArgumentParser(add_help=False)
    gen.add_argument("--count", type=int, default=5000, help="events to produce (default: %(default)s)")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--days", type=float, default=3.0, help="spread event times over this many past days")

    p = jobs.add_parser("generate", parents=[common, gen], help="produce events to the raw topic")
    p.add_argument("--rate", type=float, default=None, help="events per second (default: as fast as possible)")
    p = jobs.add_parser("transform", parents=[common, spark], help="raw -> transformed events + aggregates")
    p.add_argument("--logic-version", type=int, default=1)
    jobs.add_parser("archive", parents=[common, spark], help="raw events -> Parquet by date")
    p = jobs.add_parser("replay", parents=[common, spark], help="re-process history with corrected logic")
    p.add_argument("--source", choices=("archive", "topic", "both"), default="both")
    p.add_argument("--logic-version", type=int, default=2)
    p.add_argument("--target-topic", default="transformed-events-v2")
    p.add_argument("--since-date", default=None, help="archive partitions from this date (YYYY-MM-DD)")
    p.add_argument("--until-date", default=None, help="archive partitions up to this date")
    p.add_argument("--starting-timestamp", type=int, default=None, help="topic records from this time (ms)")
    jobs.add_parser("all", parents=[common, spark, gen], help="generate, transform, archive, replay")
    return parser


def config_from(args: argparse.Namespace):
    from odradek.pipeline.jobs import PipelineConfig

    return PipelineConfig(
        bootstrap=args.bootstrap,
        workdir=args.workdir,
        raw_topic=args.raw_topic,
        transformed_topic=args.transformed_topic,
        aggregates_topic=args.aggregates_topic,
        replay_topic=getattr(args, "target_topic", "transformed-events-v2"),
        partitions=args.partitions,
        raw_retention_ms=args.raw_retention_ms,
        max_offsets_per_trigger=getattr(args, "max_offsets_per_trigger", None),
        trigger_interval=getattr(args, "trigger_interval", "5 seconds"),
        logic_version=getattr(args, "logic_version", 1) if args.job == "transform" else 1,
        kafka_options=_pairs(args.kafka_option, "-o"),
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from odradek.pipeline import jobs  # absolute: this file also runs as a spark-submit script

    cfg = config_from(args)
    if args.job == "generate":
        events = jobs.generate(cfg, args.count, seed=args.seed, days=args.days, rate_per_s=args.rate)
        print(json.dumps({"generated": len(events), "topic": cfg.raw_topic}))
        return 0

    spark = jobs.spark_session(f"odradek-pipeline-{args.job}", args.master, _pairs(args.conf, "--conf"))
    spark.sparkContext.setLogLevel("WARN")
    queries: list = []
    try:
        if args.job == "all":
            print(json.dumps(jobs.run_all(spark, cfg, count=args.count, seed=args.seed, days=args.days)))
            return 0
        if args.job == "replay":
            count = jobs.replay(spark, cfg, source=args.source, logic_version=args.logic_version,
                                target_topic=args.target_topic, since_date=args.since_date,
                                until_date=args.until_date, starting_timestamp_ms=args.starting_timestamp)
            print(json.dumps({"replayed": count, "topic": args.target_topic}))
            return 0
        jobs.ensure_topics(cfg)
        if args.job == "transform":
            queries = jobs.start_transform(spark, cfg, available_now=args.available_now)
        else:
            queries = [jobs.start_archive(spark, cfg, available_now=args.available_now)]
        if args.available_now:
            jobs.wait(queries)
        else:
            print(f"running {', '.join(q.name for q in queries)}; Ctrl-C stops (checkpoints: {cfg.workdir})",
                  file=sys.stderr)
            spark.streams.awaitAnyTermination()
            for q in queries:
                if q.exception() is not None:
                    raise RuntimeError(f"query {q.name} failed: {q.exception()}")
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        for q in queries:
            if q.isActive:
                q.stop()
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
