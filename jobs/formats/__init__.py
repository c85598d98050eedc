"""RocketMQ's own formats, read (and, for the simulator and tests, written) byte for byte.

Pure Python and numpy: no Spark, no lake, no clock. ``fastjson`` + ``configs`` (the broker's and clients' config
files, with the ``.bak`` fallback), ``commitlog`` (the record layout and its numba decoder), ``commitlog_encode``
(the encoder the simulator, fault corpus and benchmarks write stores with), ``consumequeue``, ``trace`` (trace
record bodies), ``msgid`` (offsetMsgId, UNIQ_KEY) and ``topics`` (which topics are RocketMQ's own).
"""
