"""What a user runs against the deployment from a pod of their own: the cluster's state and the
output's exactness, as JSON on stdout (the real node's tests run it with the cluster's DNS).

    python -m tests.app.deployment_client describe --bootstrap-servers B --topics T1,T2
    python -m tests.app.deployment_client counts --bootstrap-servers B --topic T --summary F
    python -m tests.app.deployment_client isr --bootstrap-servers B --topics T1,T2 --until FILE
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from devkit.local.observe import OutputTail

TIMEOUT_S = 60.0


def describe(bootstrap_servers: str, topics: list[str]) -> dict[str, Any]:
    """Brokers, each broker's configuration and the topics' layout and configs."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    cluster = admin.describe_cluster(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    brokers = sorted(node.id for node in cluster.nodes)
    # One broker per DescribeConfigs request (the protocol's rule); the topics in one.
    requests = [[ConfigResource(ResourceType.BROKER, str(b))] for b in brokers]
    requests.append([ConfigResource(ResourceType.TOPIC, t) for t in topics])
    configs = {
        f"{resource.restype.name.lower()}:{resource.name}": {
            key: entry.value for key, entry in future.result(TIMEOUT_S).items()
        }
        for request in requests
        for resource, future in admin.describe_configs(request).items()
    }
    metadata = admin.list_topics(timeout=TIMEOUT_S).topics
    layout = {
        name: {
            "partitions": len(metadata[name].partitions),
            "replicas": sorted({len(p.replicas) for p in metadata[name].partitions.values()}),
        }
        for name in topics
        if name in metadata
    }
    return {"brokers": brokers, "configs": configs, "topics": layout}


def counts(bootstrap_servers: str, topic: str, summary: Path, timeout_s: float) -> dict[str, Any]:
    """The output's newest value per key against the load generator's summary (`expected`:
    what its aggregation makes of the records the broker acknowledged)."""
    expected = {
        key: value.encode("utf-8")
        for key, value in json.loads(summary.read_text(encoding="utf-8"))["expected"].items()
    }
    tail = OutputTail(bootstrap_servers, topic).start()
    try:
        caught_up = tail.wait_until_caught_up(timeout_s)
        latest, _, _ = tail.snapshot()
        wrong = sorted(
            k for k in expected.keys() | latest.keys() if latest.get(k) != expected.get(k)
        )
        describe = (
            f"{len(expected)} keys, all exact"
            if not wrong
            else f"{len(wrong)} of {len(expected)} keys wrong, e.g. "
            + ", ".join(
                f"{k}: {expected.get(k)!r} expected, {latest.get(k)!r} found" for k in wrong[:3]
            )
        )
        return {"ok": not wrong and caught_up, "caught_up": caught_up, "describe": describe}
    finally:
        tail.stop()


def isr(bootstrap_servers: str, topics: list[str], until: Path) -> dict[str, Any]:
    """The in-sync replicas of the topics' partitions, sampled every half second until the file
    `until` exists (15 minutes at most): the smallest ISR seen, and how many samples had one
    smaller than the replica count (a broker out of sync)."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    samples, short, failed, smallest = 0, 0, 0, None
    deadline = time.monotonic() + 900
    while not until.exists() and time.monotonic() < deadline:
        try:
            metadata = admin.list_topics(timeout=5).topics
        except KafkaException:  # a broker restarting: the sample is lost, not the watch
            failed += 1
            continue
        partitions = [p for t in topics if t in metadata for p in metadata[t].partitions.values()]
        if partitions:
            samples += 1
            fewest = min(len(p.isrs) for p in partitions)
            smallest = fewest if smallest is None else min(smallest, fewest)
            short += any(len(p.isrs) < len(p.replicas) for p in partitions)
        time.sleep(0.5)
    return {"samples": samples, "smallest_isr": smallest, "short": short, "failed": failed}


def main(argv: list[str]) -> int:
    """Run one command; print its JSON."""
    parser = argparse.ArgumentParser(prog="python -m tests.app.deployment_client")
    sub = parser.add_subparsers(dest="command", required=True)
    described = sub.add_parser("describe")
    described.add_argument("--bootstrap-servers", required=True)
    described.add_argument("--topics", default="")
    counted = sub.add_parser("counts")
    counted.add_argument("--bootstrap-servers", required=True)
    counted.add_argument("--topic", required=True)
    counted.add_argument("--summary", type=Path, required=True)
    counted.add_argument("--timeout-s", type=float, default=120.0)
    watched = sub.add_parser("isr")
    watched.add_argument("--bootstrap-servers", required=True)
    watched.add_argument("--topics", required=True)
    watched.add_argument("--until", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "describe":
        result = describe(args.bootstrap_servers, [t for t in args.topics.split(",") if t])
    elif args.command == "isr":
        result = isr(args.bootstrap_servers, args.topics.split(","), args.until)
    else:
        result = counts(args.bootstrap_servers, args.topic, args.summary, args.timeout_s)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
