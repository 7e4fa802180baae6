"""What each case of the rolling-restart benchmark does to the running pipeline: restart one
instance, roll them all, scale, switch a pair's sides or roll the brokers, and when its
partitions were processed again."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from functools import partial

from confluent_kafka.admin import AdminClient

from app.admin.broker_readiness import judge
from app.admin.pair_release import ReleaseStepError, other_side, release
from app.admin.pair_switch import PairClients, SwitchRefusedError, read_control, switch, wait_taken
from app.clients.waiting import poll_until
from devkit.bench import coordinators
from devkit.bench.measure import Timeline
from devkit.bench.restart_cases import SCALE_OUT, BenchParams, Case
from devkit.bench.settling import (
    advanced,
    all_ready,
    at_ends,
    first_sample,
    instance_status,
    judged_ready,
)
from devkit.kraft_cluster import KraftCluster
from devkit.local.instances import InstanceStatus, ProcessorProcess
from devkit.local.pipeline import LocalPipeline
from devkit.local.roll import RollFailed, RollStep, roll_instances, wait_available
from devkit.local_ports import HOST

log = logging.getLogger("devkit.bench")


@dataclass
class Restart:
    """What happened around one restart of one instance."""

    case: Case
    target: str
    moved: tuple[int, ...]  # the target's partitions before the restart
    before: dict[str, InstanceStatus]
    stopped_at: float
    started_at: float
    recovered_at: float | None = None
    after: dict[str, InstanceStatus] = field(default_factory=dict)
    # Instances that exited during the case by themselves (a broker roll restarts none).
    exited: tuple[str, ...] = ()
    # A pair's switch: when its record was written (the output around it is reported apart).
    switched_at: float | None = None
    # What the case wants the table to say about it (which broker had which role).
    note: str = ""


def restart(
    pipeline: LocalPipeline, timeline: Timeline, case: Case, params: BenchParams
) -> Restart:
    """Stop (or kill) the last instance, wipe its state if the case says so, keep it down if
    the case says so, start it, and wait until its partitions are processed again: by it, or
    after a crash by whichever instance has them."""
    target = pipeline.instances[-1]
    sample = timeline.take()
    before = {s.name: s for s in sample.instances}
    moved = tuple(before[target.name].partitions or ())
    log.info("case %s: %s; stopping %s (partitions %s)", case.name, case.description,
             target.name, list(moved))  # fmt: skip
    stopped_at = time.time()
    if case.crash:
        target.kill()
    else:
        target.stop()
    # Where the partitions stand once the stopped instance's last batch has committed: only
    # progress past this is processing again. After a crash, where they stood before it: its
    # open transaction keeps their committed offsets unfetchable until it is aborted, and the
    # restart (at once, as the kubelet does) must not wait for a lookup.
    at_stop = sample if case.crash else timeline.take()
    # "Processed again" after a crash: past every record that existed at the kill (the sample
    # before it may miss the batch the killed instance committed just before dying).
    passed = (
        at_ends(at_stop.lag, pipeline.lag.ends()) if case.crash and pipeline.lag else at_stop.lag
    )
    if case.wipe_state:
        target.wipe_state()
    recovered = None
    if case.stays_down:
        recovered = first_sample(
            timeline, params.recovery_timeout_s, lambda s: advanced(s, passed, moved)
        )
    else:
        # Down past the session timeout (a failover), else for `down_s` (a restart).
        down_s = params.session_timeout_ms / 1000 + 10 if case.outlive_session else params.down_s
        time.sleep(max(0.0, stopped_at + down_s - time.time()))
    started_at = time.time()
    target.start()
    event = Restart(case, target.name, moved, before, stopped_at, started_at)
    if not case.stays_down:
        recovered = first_sample(
            timeline,
            params.recovery_timeout_s,
            # After a crash its partitions count as back wherever they are processed.
            lambda s: (
                (case.crash or instance_status(s, target.name).ready) and advanced(s, passed, moved)
            ),
        )
    if recovered is not None:
        event.recovered_at = recovered.at
        log.info("case %s: processed again %.0f s after the stop", case.name,
                 recovered.at - stopped_at)  # fmt: skip
    return _after_tail(timeline, event, params)


def rollout(
    pipeline: LocalPipeline, timeline: Timeline, case: Case, params: BenchParams
) -> Restart:
    """Restart every instance in turn as the StatefulSet controller rolls pods: highest ordinal
    first, the next one only when the previous is ready and has stayed so `min_ready_s`."""
    sample = timeline.take()
    before = {s.name: s for s in sample.instances}
    every = tuple(sorted(p for s in sample.instances for p in (s.partitions or ())))
    log.info("case %s: %s (partitions %s)", case.name, case.description, list(every))
    stopped_at = time.time()
    started = [stopped_at]

    def note_start(step: RollStep) -> None:
        if step.waiting_for == "ready":
            started.append(time.time())

    try:
        roll_instances(
            pipeline.instances, params.min_ready_s, params.recovery_timeout_s, note_start
        )
    except RollFailed as exc:
        log.warning("case %s: %s", case.name, exc)
    event = Restart(case, "every instance", every, before, stopped_at, started[-1])
    return _all_processing_again(timeline, event, params, "rollout done, every partition processed")


def scale(pipeline: LocalPipeline, timeline: Timeline, case: Case, params: BenchParams) -> Restart:
    """Scale the deployment out to `scale_to` instances (each new one once the one before has
    been ready `min_ready_s`, as `OrderedReady` adds pods) or in back to `instances` (highest
    ordinal first, each once the one before has stopped); then wait until every instance is
    ready and every partition processed again. Every partition is watched: any may move."""
    count = params.scale_to if case.scale == SCALE_OUT else params.instances
    sample = timeline.take()
    before = {s.name: s for s in sample.instances}
    every = tuple(range(params.partitions))
    log.info("case %s: %s; %d -> %d instances", case.name, case.description, len(before), count)
    stopped_at = time.time()

    def available(instance: ProcessorProcess) -> None:
        wait_available(instance, params.min_ready_s, params.recovery_timeout_s, threading.Event())

    try:
        pipeline.scale_to(count, available)
    except RollFailed as exc:
        log.warning("case %s: %s", case.name, exc)
    target = f"{len(before)} -> {count} instances"
    event = Restart(case, target, every, before, stopped_at, time.time())
    return _all_processing_again(timeline, event, params, f"scaled to {count}")


def _all_processing_again(
    timeline: Timeline, event: Restart, params: BenchParams, done: str
) -> Restart:
    """Wait until every instance is ready and every partition processed past where it stood
    now, then `tail_s`; `event` with when that was and the instances' status after."""
    at_end = timeline.take()
    recovered = first_sample(
        timeline,
        params.recovery_timeout_s,
        lambda s: all_ready(s) and advanced(s, at_end.lag, event.moved),
    )
    if recovered is not None:
        event.recovered_at = recovered.at
        log.info("case %s: %s %.0f s after it began", event.case.name, done,
                 recovered.at - event.stopped_at)  # fmt: skip
    return _after_tail(timeline, event, params)


def _after_tail(timeline: Timeline, event: Restart, params: BenchParams) -> Restart:
    """`event` with the instances' status `tail_s` later, once the case has settled."""
    time.sleep(params.tail_s)
    event.after = {s.name: s for s in timeline.take().instances}
    return event


def pair_case(
    pipeline: LocalPipeline, timeline: Timeline, case: Case, params: BenchParams
) -> Restart:
    """`pair-switch`: the release procedure (`app.admin.pair_release`), each side's upgrade a
    roll of its instances. `pair-failover`: every instance of the active side killed, the other
    side switched to with `--force` at once (what an automated failover would do), the killed
    side started again."""
    clients = PairClients(
        {**pipeline.setup.client.resolved, "bootstrap.servers": pipeline.bootstrap_servers},
        pipeline.names.pair_control_topic,
        pipeline.names.input_topic,
        {d.side: d.application_id for d in pipeline.names.deployments(pair=True) if d.side},
    )
    sample = timeline.take()
    before = {s.name: s for s in sample.instances}
    every = tuple(range(params.partitions))
    log.info("case %s: %s", case.name, case.description)
    stopped_at = time.time()
    active = read_control(clients).active().side
    switched: list[float] = []
    if case.crash:
        for instance in pipeline.sides[active]:
            instance.kill()
        switch(clients, other_side(active), force=True, max_lag=0)
        switched.append(time.time())
        if not wait_taken(clients, params.recovery_timeout_s):
            log.warning("case %s: the take-over did not finish", case.name)
        for instance in pipeline.sides[active]:
            instance.start()
    else:

        def upgrade(side: str) -> None:
            roll_instances(pipeline.sides[side], params.min_ready_s, params.recovery_timeout_s)

        try:
            release(clients, upgrade, max_lag=int(params.rate * params.caught_up_s),
                    timeout_s=params.recovery_timeout_s,
                    on_switch=lambda: switched.append(time.time()))  # fmt: skip
        except (ReleaseStepError, SwitchRefusedError, RollFailed) as exc:
            log.warning("case %s: %s", case.name, exc)
    event = Restart(case, "the pair", every, before, stopped_at, stopped_at)
    event.switched_at = switched[0] if switched else None
    return _all_processing_again(timeline, event, params, "done, both sides processing")


def broker_roll(
    pipeline: LocalPipeline,
    timeline: Timeline,
    case: Case,
    params: BenchParams,
    brokers: KraftCluster,
) -> Restart:
    """Restart every broker in turn as the Kafka StatefulSet rolls them: highest node first
    (SIGTERM, a controlled shutdown), the next one once this one is ready as its pod's
    readiness sidecar judges it (back in every ISR) and has been for `min_ready_s`. With
    `case.broker_kill`: one node killed (the highest, or the one with `case.broker_role`) and
    started `broker_down_s` later, or, with `case.broker_stays_down`, once the pipeline has
    processed again without it."""
    sample = timeline.take()
    before = {s.name: s for s in sample.instances}
    every = tuple(sorted(p for s in sample.instances for p in (s.partitions or ())))
    log.info("case %s: %s", case.name, case.description)
    nodes = [n.node_id for n in brokers.nodes]
    victims, note = (nodes[-1:] if case.broker_kill else nodes[::-1]), ""
    if case.broker_role is not None:
        client = {"bootstrap.servers": pipeline.bootstrap_servers, **pipeline.setup.client.resolved}
        app_id = pipeline.setup.names.application_id
        # The group id and every transactional id derive from the application id (both engines).
        found = coordinators.find(client, app_id, app_id)
        victim, note = found.pick(case.broker_role, nodes)
        victims, note = [victim], f"broker {victim} killed; {note}"
    stopped_at = started_at = time.time()
    recovered_at = None
    for node_id in victims:
        log.info("case %s: restarting broker node %d", case.name, node_id)
        if case.broker_kill:
            # Processed again: every partition committed past where it stood at the kill (not
            # at the case's start: finding the coordinators took a second or two).
            at_kill = timeline.take()
            brokers.kill_node(node_id)
            if case.broker_stays_down:
                recovered = first_sample(
                    timeline,
                    params.recovery_timeout_s,
                    partial(advanced, before=at_kill.lag, partitions=every),
                )
                recovered_at = recovered.at if recovered is not None else None
                time.sleep(params.tail_s)
            else:
                time.sleep(params.broker_down_s)
        else:
            brokers.stop_node(node_id)
        started_at = time.time()
        brokers.start_node(node_id)
        node = brokers.node(node_id)
        beside = AdminClient({"bootstrap.servers": f"{HOST}:{node.broker_port}", "log_level": 0})
        ready = partial(judged_ready, beside, node_id)
        if poll_until(ready, params.recovery_timeout_s, interval_s=1.0) is None:
            log.warning("case %s: node %d not ready within %g s: %s", case.name, node_id,
                        params.recovery_timeout_s, judge(beside, node_id).reason)  # fmt: skip
        log.info("case %s: node %d ready %.0f s after its stop", case.name, node_id,
                 time.time() - started_at)  # fmt: skip
        time.sleep(params.min_ready_s)
    at_end = timeline.take()
    target = "one broker" if case.broker_kill else "every broker"
    if case.broker_stays_down:
        # Measured while it was lost: its return (after the window) is the next case's start.
        event = Restart(case, target, every, before, stopped_at, stopped_at, note=note)
        event.recovered_at = recovered_at
        event.after = {s.name: s for s in at_end.instances}
    else:
        event = Restart(case, target, every, before, stopped_at, started_at, note=note)
        recovered = first_sample(
            timeline, params.recovery_timeout_s, lambda s: advanced(s, at_end.lag, every)
        )
        if recovered is not None:
            event.recovered_at = recovered.at
        _after_tail(timeline, event, params)
    event.exited = tuple(i.name for i in pipeline.instances if not i.running)
    return event
