"""The Kafka client helpers shared by the processor (`app.processor`) and the cluster-side jobs
(`app.admin`), so they run in the image; the Pulumi program and the developer kit import them
too: the listeners' security settings (`kafka_security`), retries across broker restarts and
leader moves (`kafka_retry`), the `--command-config` client properties files
(`client_properties`), the java.util.Properties codec (`java_properties`) and the log line's
format. This file imports nothing: the Pulumi program's environment (no confluent-kafka, no
pyspark) imports `app.clients.kafka_security`, which needs the standard library only."""

# Every line a process of the image logs (the processor, its Spark Python processes, the jobs and
# the sidecar), so one log query reads them all.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
