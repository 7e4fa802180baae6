"""The cluster-side jobs and sidecar that administer Kafka, run from the processor image in the
cluster: the topic reconciler Job (`python -m app.admin.reconcile`, which also reconciles the users'
SCRAM credentials and ACLs), the Job that retires a rotated SCRAM mechanism's credentials
(`python -m app.admin.scram_retire`) and the brokers' readiness sidecar
(`python -m app.admin.broker_readiness`). They use the shared client helpers of `app.clients`,
the specs of `contract.topic_specs` and `contract.acl_specs`, and never the
developer kit (`devkit`)."""
