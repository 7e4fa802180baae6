"""The stateful stream processor: one pod = one Spark application = one Kafka group member."""
