"""A release of an active/standby pair, one side at a time, so that the output never pauses for
an upgrade: upgrade the idle side, wait until it has caught up, switch the active role to it,
wait until it publishes every partition, upgrade the other side, wait until it has caught up.

    python -m app.admin.pair_release --bootstrap-servers HOST:PORT --control-topic TOPIC \\
        --input-topic TOPIC --groups a=GROUP_A,b=GROUP_B [--command-config FILE] \\
        --upgrade-command 'pulumi up --yes --stack prod --config-path \\
            -c "stateful-streaming:processor.pairImages.{side}=IMAGE"'

`--upgrade-command` runs once per side with `{side}` replaced (a or b) and must return once that
side has rolled (`pulumi up` waits for the StatefulSet's roll). Every step is checked before the
next: a side that does not catch up within `--timeout` stops the release before the switch, and
a switch whose take-over does not finish stops it before the other side is touched. Run it again
after fixing what it names: it starts from whichever side is idle then. Exit codes: 0 released,
1 a step failed (the message names it), 2 usage error.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence

from app.admin import pair_switch
from app.admin.pair_switch import PairClients, read_control
from app.clients import LOG_FORMAT
from contract.processor_keys import PAIR_SIDES

log = logging.getLogger("app.admin.pair_release")


class ReleaseStepError(RuntimeError):
    """A step of the release failed; the message says which and what to look at."""


def other_side(side: str) -> str:
    """The pair's other side."""
    return next(s for s in PAIR_SIDES if s != side)


def release(
    clients: PairClients,
    upgrade: Callable[[str], None],
    *,
    max_lag: int = pair_switch.DEFAULT_MAX_LAG,
    timeout_s: float = pair_switch.DEFAULT_TIMEOUT_S,
    on_switch: Callable[[], None] = lambda: None,
) -> str:
    """Upgrade both sides through a switch (see the module docstring); the side active after.
    `on_switch` is called once the switch record is written."""
    idle = other_side(read_control(clients).active().side)
    for step, side in enumerate((idle, other_side(idle)), start=1):
        log.info("release step %d/2: upgrading side %s (idle)", step, side)
        upgrade(side)
        if not pair_switch.wait_caught_up(clients, side, max_lag, timeout_s):
            raise ReleaseStepError(
                f"side {side} did not catch up within {timeout_s:.0f} s after its upgrade: look at "
                "its pods' logs before switching to it; the other side still publishes"
            )
        if step == 1:
            pair_switch.switch(clients, side, force=False, max_lag=max_lag)
            on_switch()
            if not pair_switch.wait_taken(clients, timeout_s):
                raise ReleaseStepError(
                    f"side {side} has not taken every partition over within {timeout_s:.0f} s "
                    "(pair_switch status shows which): both sides must run for the hand-over; "
                    f"side {other_side(side)} is not upgraded yet"
                )
    log.info("released: side %s publishes, both sides upgraded", idle)
    return idle


def command_upgrade(template: str) -> Callable[[str], None]:
    """An upgrade that runs `template` with `{side}` replaced, failing on a non-zero exit."""

    def upgrade(side: str) -> None:
        command = template.replace("{side}", side)
        log.info("running: %s", command)
        code = subprocess.run(shlex.split(command), check=False).returncode
        if code != 0:
            raise ReleaseStepError(
                f"the upgrade of side {side} failed (exit code {code}): {command}"
            )

    return upgrade


def main(argv: Sequence[str] | None = None) -> int:
    """Run the release; the exit code."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    parser = argparse.ArgumentParser(
        prog="python -m app.admin.pair_release",
        description="Upgrade both sides of an active/standby pair through a switch.",
    )
    pair_switch.add_pair_arguments(parser)
    parser.add_argument(
        "--upgrade-command",
        required=True,
        help="rolls one side, with {side} replaced by a or b; returns once the side has rolled",
    )
    parser.add_argument("--max-lag", type=int, default=pair_switch.DEFAULT_MAX_LAG)
    parser.add_argument(
        "--timeout", type=float, default=pair_switch.DEFAULT_TIMEOUT_S, metavar="SECONDS"
    )
    args = parser.parse_args(argv)
    clients = pair_switch.clients_from(args)
    if clients is None:
        return 2
    try:
        release(clients, command_upgrade(args.upgrade_command), max_lag=args.max_lag,
                timeout_s=args.timeout)  # fmt: skip
    except (ReleaseStepError, pair_switch.SwitchRefusedError) as exc:
        log.error("release stopped: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
