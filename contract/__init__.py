"""The contract between the Pulumi program, the processor and the policy pack.

One row per processor key (`processor_keys`), the membership rules (`membership`), the restart
budget (`restart_budget`), Kubernetes quantities (`quantity`), the properties codec
(`java_properties`), TLS weakenings (`tls_settings`), the listeners' security and the SCRAM
mechanisms (`kafka_security`), the pipeline's topics and users with their codecs
(`topic_specs`, `acl_specs`), what each container runs (`container_commands`) and every
workload with its containers, env, ports and mounts (`workload_shapes`): stack
validation at `pulumi up`, the processor's check at start and the pack's rules in review all call
these, each with its own message framing, so a rule is stated once.

`app/`, `infra/` and `policies/` import it as `contract`. The processor image copies this
directory beside the application; the pack finds it beside its own directory in the repository,
and a published pack carries a copy inside (`python -m policies.bundle`, `make policy-pack`).
Standard library only: the pack, the processor image and the Pulumi program each have a
different environment.
"""
