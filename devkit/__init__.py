"""The developer kit: what runs on a developer's machine (and in the tests) only, never in the
image. Two halves, each named for what it starts:

- Apache Kafka and the pipeline on it: the local 3-node KRaft cluster (`kraft_cluster`; a node's
  settings and files in `kraft_node`, how the nodes stop together in `kraft_shutdown`) of the
  release `kafka_release` resolves from Maven Central, the loopback ports (`local_ports`), the
  local CA and broker certificates (`local_tls`), the local run (`python -m devkit.local`, what
  `make run` starts), the load generator (`python -m devkit.loadgen`), the benchmarks
  (`python -m devkit.bench`) and Kafka Streams beside them (`kafka_streams`). They run in the
  application's environment and may import the image's packages (`app.*`); those never import
  them.
- Kubernetes (`kube`): the Go tools built from their modules, a local control plane, a real node
  beside it and the images it runs, and Pulumi's engine against them. Its scripts run with the
  machine's Python or the program's environment (`python3 devkit/kube/node.py up`).
"""
