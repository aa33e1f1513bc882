"""bench/spark_connector.py without Spark or Maven: which jars reach `spark.jars`, and the bench's flag."""

from __future__ import annotations

import argparse

import pytest

from bench import spark_connector


@pytest.mark.parametrize("jar, artifact", [
    ("kafka-clients-3.9.2.jar", "kafka-clients"),
    ("commons-pool2-2.13.1.jar", "commons-pool2"),
    ("commons-pool-1.5.4.jar", "commons-pool"),
    ("spark-sql_2.13-4.3.0.jar", "spark-sql_2.13"),
    ("scala-library-2.13.18.jar", "scala-library"),
    ("zstd-jni-1.5.7-7.jar", "zstd-jni"),
])
def test_artifact_names_drop_the_version(jar, artifact):
    assert spark_connector._artifact(jar) == artifact


def test_the_connector_is_not_mistaken_for_a_jar_pyspark_ships():
    """The filter keeps only jars pyspark lacks: the connector's own name must never match one of pyspark's."""
    shipped = {"spark-sql_2.13", "spark-core_2.13", "spark-tags_2.13", "commons-pool", "scala-library"}
    for jar in ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "spark-token-provider-kafka-0-10_2.13-4.2.0.jar",
                "kafka-clients-3.9.2.jar", "commons-pool2-2.13.1.jar"):
        assert spark_connector._artifact(jar) not in shipped


def test_versions_come_from_the_jar_names(tmp_path):
    pytest.importorskip("pyspark")
    jars = [tmp_path / "spark-sql-kafka-0-10_2.13-4.2.0.jar", tmp_path / "kafka-clients-3.9.2.jar"]
    found = spark_connector.versions(jars)
    assert found["connector"] == "spark-sql-kafka-0-10 4.2.0" and found["kafka_clients"] == "3.9.2"


def test_disabled_target_adds_no_configuration_and_needs_no_maven():
    assert spark_connector.session_conf(False) == {}


def test_the_bench_flag():
    parser = argparse.ArgumentParser()
    spark_connector.add_argument(parser)
    assert parser.parse_args([]).kafka_connector is False
    assert parser.parse_args(["--kafka-connector"]).kafka_connector is True
