"""Which side of an active/standby pair publishes: show it, switch it, wait for the take-over.

    python -m app.admin.pair_switch --bootstrap-servers HOST:PORT --control-topic TOPIC \\
        --input-topic TOPIC --groups a=GROUP_A,b=GROUP_B [--command-config FILE] COMMAND

- `status`: the active side and its epoch, each side's lag (records of the input its group has
  not committed) and, per input partition, whether the switch's hand-over is done.
- `switch --to SIDE`: make SIDE the active side (a new epoch in the control topic). Refused
  while SIDE lags more than `--max-lag` records (it would publish late), unless `--force`. With
  `--force` the other side is taken to be down (a failover): the command releases its
  partitions for it, at its committed offsets (what it published), once the broker has aborted
  its open transactions (up to `transaction.timeout.ms`), and SIDE takes them over from there.
- `wait`: wait until the active side has taken every input partition over (every partition's
  output comes from it), or `--timeout` passes.

The release procedure (upgrade the idle side, `wait-caught-up` on it, `switch`, `wait`, upgrade
the other side) is `python -m app.admin.pair_release`. Exit codes: 0 done, 1 refused or timed
out, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from app.clients import LOG_FORMAT, client_properties
from app.clients.kafka_retry import Retrying
from app.clients.pair_control import ACTIVE_KEY, Active, ControlView, read_to_end, released_key
from app.clients.waiting import poll_until
from contract.acl_specs import pair_switch_reader_group
from contract.processor_keys import PAIR_SIDES

log = logging.getLogger("app.admin.pair_switch")

DEFAULT_MAX_LAG = 10_000
DEFAULT_TIMEOUT_S = 300.0
CLIENT_TIMEOUT_S = 30.0
PROGRESS_EVERY_S = 5.0


class SwitchRefusedError(RuntimeError):
    """The switch would break what the pair promises; the message says why and what to do."""


@dataclass(frozen=True)
class PairClients:
    """What the command needs to know about the pair."""

    config: Mapping[str, str]  # librdkafka client settings (bootstrap.servers, security)
    control_topic: str
    input_topic: str
    groups: Mapping[str, str]  # side -> its consumer group (its application.id)


def read_control(clients: PairClients) -> ControlView:
    """The control topic as it is now."""
    # Never joins: the group only names the reads (the switch user's ACLs grant it).
    group = pair_switch_reader_group(clients.control_topic)
    consumer = Consumer({**clients.config, "group.id": group})
    try:
        consumer.assign([TopicPartition(clients.control_topic, 0, OFFSET_BEGINNING)])
        view = ControlView()
        for message in read_to_end(
            consumer, TopicPartition(clients.control_topic, 0), CLIENT_TIMEOUT_S
        ):
            view.apply(message.key(), message.value())
        return view
    finally:
        consumer.close()


def side_lags(clients: PairClients) -> dict[str, dict[int, int]]:
    """Per side, per input partition: the records its group has not committed yet."""
    return {side: side_lag(clients, side) for side in sorted(clients.groups)}


def side_lag(clients: PairClients, side: str) -> dict[int, int]:
    """Per input partition: the records `side`'s group has not committed yet."""
    return {p: end - offset for p, (offset, end) in _positions(clients, side).items()}


def committed_offsets(clients: PairClients, side: str) -> dict[int, int]:
    """Per input partition: `side`'s committed offset (0 where it committed nothing)."""
    return {p: offset for p, (offset, _end) in _positions(clients, side).items()}


def _positions(clients: PairClients, side: str) -> dict[int, tuple[int, int]]:
    """Per input partition: `side`'s committed offset and the partition's end. A side whose
    instance died mid-transaction answers once the broker has aborted it (up to
    `transaction.timeout.ms`): its offsets are stable then."""
    consumer = Consumer({**clients.config, "group.id": clients.groups[side]})
    try:
        metadata = consumer.list_topics(clients.input_topic, timeout=CLIENT_TIMEOUT_S)
        partitions = sorted(metadata.topics[clients.input_topic].partitions)
        # A failover may come with lost brokers: leader moves are waited out.
        retrying = Retrying(CLIENT_TIMEOUT_S, budget_name="CLIENT_TIMEOUT_S")
        topic = clients.input_topic
        committed = retrying.committed_offsets(
            f"{clients.groups[side]}'s offsets of {topic}",
            consumer, topic, partitions, CLIENT_TIMEOUT_S,
        )  # fmt: skip
        positions = {}
        for tp in committed:
            _low, high = retrying.watermark_offsets(
                f"end of {topic}-{tp.partition}", consumer, topic, tp.partition, CLIENT_TIMEOUT_S
            )
            positions[tp.partition] = (max(tp.offset, 0), high)
        return positions
    finally:
        consumer.close()


def switch(clients: PairClients, to: str, *, force: bool, max_lag: int) -> Active:
    """Write the new `active` record; the new epoch's `Active`."""
    if to not in clients.groups:
        raise SwitchRefusedError(
            f"--to {to}: no such side; the pair's sides: {sorted(clients.groups)}"
        )
    current = read_control(clients).active()
    if current.side == to and not force:
        log.info("side %s is active already (epoch %d): nothing to switch", to, current.epoch)
        return current
    # Forced: the other side is down; its open transactions must not delay the switch.
    lag = 0 if force else sum(side_lag(clients, to).values())
    if lag > max_lag:
        raise SwitchRefusedError(
            f"side {to} lags {lag} records of {clients.input_topic} (--max-lag {max_lag}): it "
            "would publish late. Wait until it has caught up (`wait-caught-up`), or --force if "
            "the other side is down"
        )
    new = Active(to, current.epoch + 1, force)
    producer = Producer({**clients.config, "enable.idempotence": "true", "acks": "all"})
    if force:
        # The side switched off is down and cannot release its partitions: release them for
        # it, where its committed offsets say its output ended, before the switch is visible.
        down = next(side for side in clients.groups if side != to)
        for partition, offset in sorted(committed_offsets(clients, down).items()):
            record = json.dumps({"side": down, "offset": offset, "by": "pair_switch --force"})
            producer.produce(
                clients.control_topic,
                key=released_key(new.epoch, partition),
                value=record.encode(),
                partition=0,
            )
        log.info("released every partition for side %s at its committed offsets", down)
    producer.produce(clients.control_topic, key=ACTIVE_KEY, value=new.to_json(), partition=0)
    if producer.flush(CLIENT_TIMEOUT_S) > 0:
        raise SwitchRefusedError(
            f"{clients.control_topic}: the switch record was not acknowledged within "
            f"{CLIENT_TIMEOUT_S:.0f} s; run status, then switch again"
        )
    log.info(
        "switched: side %s active from epoch %d%s (was side %s)",
        to,
        new.epoch,
        ", forced: the other side released at its committed offsets" if force else "",
        current.side,
    )
    return new


def pending_take_overs(clients: PairClients) -> tuple[Active, list[int]]:
    """The active side, and the input partitions it has not taken over yet in its epoch."""
    view = read_control(clients)
    active = view.active()
    if active.epoch == 0:
        return active, []
    partitions = sorted(side_lag(clients, active.side))
    return active, [p for p in partitions if not view.taken(active.epoch, p)]


def wait_taken(clients: PairClients, timeout_s: float) -> bool:
    """Wait until the active side has taken every input partition over."""
    active: Active
    pending: list[int]

    def taken() -> bool:
        nonlocal active, pending
        active, pending = pending_take_overs(clients)
        return not pending

    if poll_until(
        taken,
        timeout_s,
        interval_s=0.5,
        progress=lambda: log.info(
            "side %s (epoch %d): waiting for the take-over of partitions %s",
            active.side,
            active.epoch,
            pending,
        ),
        progress_every_s=PROGRESS_EVERY_S,
    ):
        log.info("side %s publishes every partition (epoch %d)", active.side, active.epoch)
        return True
    log.error(
        "partitions %s not taken over by side %s within %.0f s: is the side running, "
        "and the other side too (it releases them)? If the other side is down, switch "
        "with --force",
        pending,
        active.side,
        timeout_s,
    )
    return False


def wait_caught_up(clients: PairClients, side: str, max_lag: int, timeout_s: float) -> bool:
    """Wait until `side` lags at most `max_lag` records of the input."""
    lag = 0

    def caught_up() -> bool:
        nonlocal lag
        lag = sum(side_lag(clients, side).values())
        return lag <= max_lag

    if poll_until(
        caught_up,
        timeout_s,
        interval_s=1.0,
        progress=lambda: log.info(
            "side %s lags %d records (--max-lag %d): waiting", side, lag, max_lag
        ),
        progress_every_s=PROGRESS_EVERY_S,
    ):
        log.info("side %s lags %d records: caught up (--max-lag %d)", side, lag, max_lag)
        return True
    log.error("side %s still lags %d records after %.0f s", side, lag, timeout_s)
    return False


def status(clients: PairClients) -> str:
    """A few lines: the active side, each side's lag, the hand-over's state."""
    view = read_control(clients)
    active = view.active()
    lags = side_lags(clients)
    lines = [
        f"active: side {active.side}, epoch {active.epoch}" + (" (forced)" if active.forced else "")
    ]
    for side, per_partition in sorted(lags.items()):
        role = "active" if side == active.side else "idle"
        lines.append(
            f"side {side} ({role}, group {clients.groups[side]}): lag {sum(per_partition.values())}"
        )
    if active.epoch > 0:
        for p in sorted(lags[active.side]):
            released = view.released(active.epoch, p)
            state = "taken" if view.taken(active.epoch, p) else "waiting"
            lines.append(
                f"partition {p}: {state}"
                + (f", released at {released}" if released is not None else "")
            )
    return "\n".join(lines)


def _groups(text: str) -> dict[str, str]:
    groups = {}
    for item in text.split(","):
        side, _, group = item.partition("=")
        if side not in PAIR_SIDES or not group:
            raise argparse.ArgumentTypeError(
                f"{item!r}: expected SIDE=GROUP with SIDE one of {', '.join(PAIR_SIDES)}"
            )
        groups[side] = group
    if sorted(groups) != sorted(PAIR_SIDES):
        raise argparse.ArgumentTypeError(
            f"name both sides: {','.join(f'{s}=GROUP' for s in PAIR_SIDES)}"
        )
    return groups


def add_pair_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that name the pair (this command's and the release's)."""
    parser.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT[,...]")
    parser.add_argument("--control-topic", required=True, help="the pair's pair.control.topic")
    parser.add_argument("--input-topic", required=True)
    parser.add_argument(
        "--groups",
        required=True,
        type=_groups,
        metavar="a=GROUP,b=GROUP",
        help="each side's consumer group (its application.id)",
    )
    client_properties.add_argument(parser)


def clients_from(args: argparse.Namespace) -> PairClients | None:
    """The pair the parsed flags name; None (after printing why) for a bad --command-config."""
    try:
        config = client_properties.ClientConfig.load(args.command_config, dict(os.environ))
    except client_properties.ClientPropertiesError as exc:
        print(exc, file=sys.stderr)
        return None
    return PairClients(
        {**config.resolved, "bootstrap.servers": args.bootstrap_servers},
        args.control_topic,
        args.input_topic,
        args.groups,
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line (argparse exits with 2 on a usage error)."""
    parser = argparse.ArgumentParser(
        prog="python -m app.admin.pair_switch",
        description="Show or switch the active side of an active/standby processor pair.",
    )
    add_pair_arguments(parser)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("status", help="the active side, the lags, the hand-over")
    to = commands.add_parser("switch", help="make a side the active one")
    to.add_argument("--to", required=True, choices=PAIR_SIDES)
    to.add_argument("--force", action="store_true", help="the other side is down: take over now")
    to.add_argument("--max-lag", type=int, default=DEFAULT_MAX_LAG)
    wait = commands.add_parser("wait", help="wait until the active side publishes everything")
    wait.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS")
    caught_up = commands.add_parser("wait-caught-up", help="wait until a side has caught up")
    caught_up.add_argument("--side", required=True, choices=PAIR_SIDES)
    caught_up.add_argument("--max-lag", type=int, default=DEFAULT_MAX_LAG)
    caught_up.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; the exit code."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    args = parse_args(argv)
    clients = clients_from(args)
    if clients is None:
        return 2
    try:
        if args.command == "status":
            print(status(clients))
            return 0
        if args.command == "switch":
            switch(clients, args.to, force=args.force, max_lag=args.max_lag)
            return 0
        if args.command == "wait":
            return 0 if wait_taken(clients, args.timeout) else 1
        return 0 if wait_caught_up(clients, args.side, args.max_lag, args.timeout) else 1
    except SwitchRefusedError as exc:
        log.error("%s", exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
