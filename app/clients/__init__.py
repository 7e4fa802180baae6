"""The Kafka client helpers shared by the processor (`app.processor`) and the cluster-side jobs
(`app.admin`), so they run in the image; the developer kit imports them too: retries across
broker restarts and leader moves (`kafka_retry`), the `--command-config` client properties
files (`client_properties`), the log line's format, and the /live, /ready and /metrics endpoint
their pods' probes and Prometheus read (`probe_endpoint`). The properties codec
(`contract.java_properties`) and the listeners' security settings
(`contract.kafka_security`) are the contract's."""

# Every line a process of the image logs (the processor, its Spark Python processes, the jobs and
# the sidecar), so one log query reads them all.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
