"""The PySpark data source for Odradek topics and the reference pipelines."""
