"""What operators get after the pipeline runs, and what keeps the lake healthy.

``quality`` (Great Expectations suites on each run's rows), ``alerts`` + ``notifiers`` (what changed, by webhook and
email), ``metrics`` (Pushgateway), ``dashboard`` (the static site) and ``maintenance`` (compaction and vacuum).
"""
