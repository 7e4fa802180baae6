"""The developer kit, run on a developer's machine (and by the tests) only, never copied into
the image: the local run (`python -m app.devkit.local`, what `make run` starts), the benchmarks
(`python -m app.devkit.bench`), the load generator (`python -m app.devkit.loadgen`), the local
3-node KRaft cluster (`kraft_cluster`; a node's settings and files in `kraft_node`, how they stop
together in `kraft_shutdown`) of the Apache Kafka release `kafka_release` resolves from Maven
Central, the loopback ports they all listen on (`local_ports`), and the local CA and broker
certificates (`local_tls`). It may import the image's
packages (`app.processor`, `app.admin`, `app.clients`); they never import it."""
