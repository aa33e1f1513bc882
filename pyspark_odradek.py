"""`format("odradek")` in every Spark 4 session, with nothing to register.

How Spark finds it. The first time a session needs a data source it does not know (the first
`spark.read.format(...)` / `spark.dataSource` call of the JVM, not of the session), Spark's
DataSourceManager starts one Python worker (pyspark/sql/worker/lookup_data_sources.py) that walks
`pkgutil.iter_modules()` -- the top-level modules on the worker's `sys.path` -- imports every one whose
name starts with `pyspark_`, and registers its `DefaultSource` attribute under `DefaultSource.name()`
when that is a subclass of `pyspark.sql.datasource.DataSource`. The result is cached for the life of
the JVM (a static of DataSourceManager), beside the per-session registrations of
`spark.dataSource.register`.

So this top-level module is installed next to the `odradek` package (pyproject's `py-modules`), and its
`DefaultSource` is the data source class itself: Spark pickles it by reference, so executors import it
from `odradek.pipeline.datasource` like any registered source.

What it does not cover, and where `odradek.pipeline.register(spark)` stays the answer:
* an editable install (`pip install -e`): setuptools serves the mapped packages through an import hook
  that `pkgutil.iter_modules` does not list, so the lookup worker never sees this module;
  (the worker is started with `python -m`, so it also lists the JVM's working directory: a Spark started
  from the root of a checkout finds this file there);
* a Python worker whose interpreter is not the one odradek was installed into (`PYSPARK_PYTHON`);
* Spark 3.x, which has no Python data sources at all (register fails there too, with a clear error).

Importing this module imports pyspark: only Spark's lookup worker (or a user) imports it.
"""

from odradek.pipeline.datasource import OdradekDataSource as DefaultSource

__all__ = ["DefaultSource"]
