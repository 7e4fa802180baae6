"""The stateful stream processor: one pod = one Spark application = one Kafka group member."""

# Every line an instance logs, from its main process and from Spark's Python processes alike.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
