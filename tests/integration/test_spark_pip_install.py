"""`pip install 'odradek[spark]'` into a fresh virtualenv, then `spark.read.format("odradek")` with no
register call and no odradek import in the driver, against a real broker process.

A non-editable install, so that the top-level `pyspark_odradek` module is really in site-packages, where
Spark 4's lookup of Python data sources (`pkgutil.iter_modules`, see pyspark_odradek.py) finds it; the
module-level test in test_spark_datasource.py fakes that with PYTHONPATH, this one does it for real.

Behind ODRADEK_LONG=1: building the venv takes minutes (pyspark 4.3.0 is a 456 MB sdist; pip caches the
wheel it builds, so later runs take about one). Run it by hand with

    ODRADEK_LONG=1 .venv/bin/python -m pytest -n 0 -s tests/integration/test_spark_pip_install.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

if not os.environ.get("ODRADEK_LONG"):
    pytest.skip("builds a virtualenv with pyspark (minutes): set ODRADEK_LONG=1", allow_module_level=True)
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs Java 17+ (no java on PATH, no JAVA_HOME)", allow_module_level=True)

from odradek.client.blocking import BlockingAdmin, BlockingProducer  # noqa: E402
from tests.brokerproc import BrokerProcess  # noqa: E402

pytestmark = pytest.mark.timeout(1800)

REPO = Path(__file__).resolve().parents[2]

_DRIVER = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").appName("odradek-pip-proof")
         .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
df = (spark.read.format("odradek").option("kafka.bootstrap.servers", sys.argv[1])
      .option("subscribe", sys.argv[2]).load())
rows = df.collect()
assert "odradek" not in sys.modules and "odradek.pipeline" not in sys.modules, "the driver imported odradek"
import pyspark_odradek, pyspark
print("MODULE", pyspark_odradek.__file__)
print("PYSPARK", pyspark.__version__)
print("SCHEMA", df.schema.simpleString())
print("ROWS", len(rows), "VALUES", ",".join(sorted(r.value.decode() for r in rows)))
spark.stop()
"""


def test_fresh_venv_pip_install_then_format_odradek_with_nothing_registered(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    # a copy of the tree without its build leftovers and virtualenvs: what a user's checkout or sdist holds
    source = tmp_path / "src"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "__pycache__",
                                                                ".mypy_cache", ".pytest_cache"))
    installed = subprocess.run([str(python), "-m", "pip", "install", "-q", f"{source}[spark]"],
                               capture_output=True, text=True, timeout=1500)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    listed = subprocess.run([str(python), "-m", "pip", "show", "-f", "odradek"], capture_output=True, text=True,
                            timeout=120).stdout
    assert "pyspark_odradek.py" in listed and "Editable project location" not in listed, listed[-2000:]

    broker = BrokerProcess(tmp_path / "broker").start()
    try:
        topic = f"pip-{uuid.uuid4().hex[:6]}"
        admin = BlockingAdmin(bootstrap_servers=broker.bootstrap)
        admin.create_topic(topic, 2, 1)
        admin.close()
        producer = BlockingProducer(bootstrap_servers=broker.bootstrap)
        for i in range(6):
            producer.send(topic, b"v%d" % i, partition=i % 2)
        producer.flush()
        producer.close()
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python), SPARK_LOCAL_IP="127.0.0.1")
        done = subprocess.run([str(python), "-c", _DRIVER, broker.bootstrap, topic], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=600)
        print(done.stdout)
        assert done.returncode == 0, done.stderr[-4000:]
        assert "ROWS 6 VALUES v0,v1,v2,v3,v4,v5" in done.stdout
        assert f"MODULE {venv}" in done.stdout
    finally:
        broker.stop()
