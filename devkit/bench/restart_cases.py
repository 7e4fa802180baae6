"""The rolling-restart benchmark's scenario matrix: each case, and the sizes and timings every
case runs at."""

from __future__ import annotations

from dataclasses import dataclass, field

from contract.processor_keys import DEFAULTS, MEMBERSHIP_HANDOFF, MEMBERSHIP_STATIC
from devkit.bench import coordinators
from devkit.bench.variant import Variant
from devkit.local.instances import LOCAL_SESSION_TIMEOUT_MS
from devkit.local.pipeline import ENGINE_PROCESSOR

NEEDS_BROKERS = (
    "needs brokers the bench can restart: run without --bootstrap-servers (the bench then "
    "starts 3 KRaft nodes of its own)"
)


SCALE_OUT, SCALE_IN = "scale-out", "scale-in"


@dataclass(frozen=True)
class Case:
    """One scenario of the matrix."""

    name: str
    description: str
    stateful: bool = True  # False: dynamic membership, leaves the group on close
    membership_mode: str = MEMBERSHIP_STATIC
    wipe_state: bool = False
    # Down longer than the session timeout (failover) instead of restarting at once.
    outlive_session: bool = False
    # Every instance restarted in turn, highest ordinal first, each once the previous one is
    # ready and has been for `min_ready_s` (what the StatefulSet controller does in a roll).
    rollout: bool = False
    # Keeps `num.standby.replicas` warm copies (hand-off mode always does: it hands to them).
    standbys: bool = False
    # The brokers restarted in turn, as the Kafka StatefulSet rolls them; no instance restarts.
    broker_roll: bool = False
    # Instead, one broker killed (SIGKILL, a lost node) and started `broker_down_s` later.
    broker_kill: bool = False
    # Which broker: the one with this role for the pipeline (`coordinators.ROLES`), not the
    # highest node (the Kafka StatefulSet's last pod).
    broker_role: str | None = None
    # The killed broker stays lost until the pipeline has processed again and the tail is over;
    # only then is it started, so the next case finds every broker.
    broker_stays_down: bool = False
    # The instance is SIGKILLed (a crash, an OOM kill, a lost node) instead of stopped.
    crash: bool = False
    # It stays down until the others process its partitions (a node that never comes back);
    # only then is it started again, so the next case finds the whole pipeline.
    stays_down: bool = False
    # An active/standby pair (`instances` per side): the case acts on the pair as a whole.
    pair: bool = False
    # The deployment scaled instead: out to `scale_to` instances, or in back to `instances`.
    scale: str | None = None

    def standby_replicas(self, params: BenchParams) -> int:
        """The case's `num.standby.replicas`."""
        keeps = self.standbys or self.membership_mode == MEMBERSHIP_HANDOFF
        return params.standby_replicas if keeps else 0


CASES: tuple[Case, ...] = (
    Case("static-kept", "static membership, restart within the session timeout, state kept"),
    Case(
        "static-wiped",
        "static membership, restart within the session timeout, state dir wiped (lost PVC)",
        wipe_state=True,
    ),
    Case(
        "dynamic-kept",
        "dynamic membership (no group.instance.id: stateful=false), state dir kept",
        stateful=False,
    ),
    Case(
        "static-failover",
        "static membership, down longer than the session timeout (failover)",
        outlive_session=True,
    ),
    Case(
        "standby-failover",
        "static membership with standbys, down longer than the session timeout: the others "
        "take its partitions over from their warm copies",
        standbys=True,
        outlive_session=True,
    ),
    Case(
        "handoff",
        "membership.mode=handoff: leaves the group on SIGTERM, restarts warm, then joins; "
        "state kept",
        membership_mode=MEMBERSHIP_HANDOFF,
    ),
    Case(
        "handoff-wiped",
        "membership.mode=handoff, state dir wiped (a lost PVC, a new pod): the instance "
        "restarts with no copy, catches up the copies of what it may be handed, then joins",
        membership_mode=MEMBERSHIP_HANDOFF,
        wipe_state=True,
    ),
    Case(
        "handoff-crash-restart",
        "membership.mode=handoff, the instance SIGKILLed and started again at once (the "
        "kubelet restarting a crashed container): its partitions wait for its session to "
        "expire, then move to warm standbys",
        membership_mode=MEMBERSHIP_HANDOFF,
        crash=True,
    ),
    Case(
        "handoff-crash-gone",
        "membership.mode=handoff, the instance SIGKILLed and not back (a lost node): the "
        "others take its partitions over from their warm copies once its session expires",
        membership_mode=MEMBERSHIP_HANDOFF,
        crash=True,
        stays_down=True,
    ),
    Case(
        "rollout-static",
        "rolling update of every instance, static membership, state kept",
        rollout=True,
    ),
    Case(
        "rollout-handoff",
        "rolling update of every instance, membership.mode=handoff, state kept",
        membership_mode=MEMBERSHIP_HANDOFF,
        rollout=True,
    ),
    Case(
        "pair-switch",
        "active/standby pair, each side in hand-off mode: a release under load as "
        "`python -m app.admin.pair_release` does it (roll the idle side, wait until it has "
        "caught up, switch, wait for the take-over, roll the other side)",
        membership_mode=MEMBERSHIP_HANDOFF,
        pair=True,
    ),
    Case(
        "pair-failover",
        "active/standby pair: every instance of the active side SIGKILLed at once (a bad "
        "release, a lost zone), the other side switched to at once (`switch --force`), the "
        "killed side started again (it comes back idle)",
        membership_mode=MEMBERSHIP_HANDOFF,
        pair=True,
        crash=True,
    ),
    Case(
        SCALE_OUT,
        "membership.mode=handoff, scaled out under load to --scale-to instances as the "
        "StatefulSet controller adds pods: each new one (an empty volume) warms the copies of "
        "what it may be handed, joins, and the next starts once it has been ready "
        "--min-ready-s",
        membership_mode=MEMBERSHIP_HANDOFF,
        scale=SCALE_OUT,
    ),
    Case(
        SCALE_IN,
        "membership.mode=handoff, scaled in under load back to --instances, highest ordinal "
        "first, each removed pod (SIGTERM) handing its partitions to warm copies before the "
        "next one stops",
        membership_mode=MEMBERSHIP_HANDOFF,
        scale=SCALE_IN,
    ),
    Case(
        "broker-roll",
        "rolling restart of the 3 brokers under load (highest node first, each once back in "
        "every ISR); the instances keep running",
        broker_roll=True,
    ),
    Case(
        "broker-kill",
        "one broker killed (SIGKILL, a lost node) under load and started again after "
        "--broker-down-s; the instances keep running",
        broker_roll=True,
        broker_kill=True,
    ),
    *(
        Case(
            f"broker-kill-{role}",
            f"the broker that is the pipeline's {what} killed (SIGKILL, a lost node) under "
            "load and started again after --broker-down-s; the instances keep running",
            membership_mode=MEMBERSHIP_HANDOFF,
            broker_roll=True,
            broker_kill=True,
            broker_role=role,
        )
        for role, what in (
            (coordinators.GROUP_COORDINATOR, "group's coordinator"),
            (coordinators.TRANSACTION_COORDINATOR, "producers' transaction coordinator"),
            (coordinators.NEITHER, "neither group nor transaction coordinator"),
        )
    ),
    Case(
        "broker-lost-group-coordinator",
        "the broker that is the pipeline's group coordinator killed (SIGKILL) under load and "
        "not started again until the pipeline has processed again (a node that never comes "
        "back); the instances keep running",
        membership_mode=MEMBERSHIP_HANDOFF,
        broker_roll=True,
        broker_kill=True,
        broker_role=coordinators.GROUP_COORDINATOR,
        broker_stays_down=True,
    ),
    Case(
        "stateless-leave",
        "stateless variant: leaves the group on close, no state dir (an emptyDir)",
        stateful=False,
        wipe_state=True,
    ),
)
CASE_NAMES = tuple(c.name for c in CASES)


@dataclass(frozen=True)
class BenchParams:
    """Sizes and timings of every case (small by default: a case takes a minute or two)."""

    instances: int = 2
    # How many instances the scale-out case grows the deployment to.
    scale_to: int = 3
    partitions: int = 4
    rate: float = 100.0
    keys: int = 40
    skew: float = 1.1
    session_timeout_ms: int = LOCAL_SESSION_TIMEOUT_MS
    heartbeat_interval_ms: int = int(DEFAULTS["consumer.heartbeat.interval.ms"])
    # The consumer group protocols to run every case under, one after another (KIP-848's
    # `consumer`: the session and heartbeat are the group's own configs).
    group_protocols: tuple[str, ...] = (DEFAULTS["consumer.group.protocol"],)
    group_protocol: str = DEFAULTS["consumer.group.protocol"]  # the one a pipeline runs
    # Contract keys to run every case under, one variant after another (the defaults alone
    # unless `--set` adds more): a setting's effect on a restart, measured in one run.
    variants: tuple[Variant, ...] = field(default_factory=lambda: (Variant(),))
    variant_index: int = 0  # the one a pipeline runs
    # What the instances run, every case under each: the processor, and Kafka Streams beside it
    # on the same brokers (`devkit.kafka_streams`; the classic protocol, no --set).
    engines: tuple[str, ...] = (ENGINE_PROCESSOR,)
    engine: str = ENGINE_PROCESSOR  # the one a pipeline runs
    # Every engine, protocol and variant runs this many times, in turn (A B A B): a hand-off's
    # longest gap varies by more than a second from run to run on 2 shared cores, so a
    # difference counts only beside that spread, measured in the same run.
    rounds: int = 1
    round_index: int = 0  # the one a pipeline runs
    # num.standby.replicas of the cases that keep standbys (hand-off needs a copy to hand to).
    standby_replicas: int = 1
    steady_s: float = 10.0  # steady processing before the restart
    # Before the rows, the first row's pipeline runs once until it is settled and has processed
    # `steady_s`, and is dropped: the first pipeline after the brokers' start pays their JIT.
    warm_up: bool = True
    min_ready_s: float = 10.0  # a rollout's minReadySeconds (the dev stack's)
    # "Caught up": at most this many seconds of input not yet committed (batches take 1-10 s
    # on a busy 2-core machine).
    caught_up_s: float = 20.0
    tail_s: float = 10.0  # after recovery, before the load stops
    ready_timeout_s: float = 240.0
    broker_down_s: float = 120.0  # how long the broker-kill case keeps its broker down
    # How long a restarted instance stays down from its stop to its start: 0 restarts it as
    # soon as it has exited (the kubelet's restart of a container); a pod replaced in a roll is
    # down while it terminates and is scheduled again (Kafka Streams' restart measured: 5 s).
    down_s: float = 0.0
    recovery_timeout_s: float = 240.0
    drain_timeout_s: float = 300.0
    seed: int = 42

    @property
    def variant(self) -> Variant:
        """The variant a pipeline runs."""
        return self.variants[self.variant_index]
