"""PySpark jobs of the RocketMQ reconciliation pipeline and the library they share."""
