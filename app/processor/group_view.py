"""What a member learns from its group's description: which partitions' copies it keeps as a
standby, and the description that tells whether an empty assignment is settled.

The member's own consumer does not know which partitions the other members own, so the group is
described, and by a child process (`group_describer`): librdkafka's `describe_consumer_groups`
crashed its process around a coordinator change. Who keeps which copy is the ring of
`state_restore.standby_partitions`, beside the restore protocol that reads the copies.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from app.processor.group_describer import GroupDescriber, GroupDescription
from app.processor.state_restore import Member, standby_partitions, warm_up_partitions

log = logging.getLogger("app.processor.group_member")

# What the admin client that describes the group takes from the member's settings.
_ADMIN_KEYS = ("bootstrap.servers", "client.id", "security.protocol")
_ADMIN_PREFIXES = ("sasl.", "ssl.")
# How often a description waited for is looked for (the child answers in a few ms once started).
DESCRIBE_POLL_S = 0.05


class GroupView:
    """Asks for the group's description without waiting, and reads standbys from it."""

    def __init__(
        self, consumer_config: Mapping[str, str], topic: str, name: str, standby_replicas: int
    ) -> None:
        self.topic = topic
        self.name = name  # the member's name in the ring (group.instance.id, else client.id)
        self.standby_replicas = standby_replicas
        self._group_id = consumer_config["group.id"]
        self._admin_config = {
            k: v
            for k, v in consumer_config.items()
            if k in _ADMIN_KEYS or k.startswith(_ADMIN_PREFIXES)
        }
        # Started when first needed: a member without standbys may never describe its group.
        self._describer: GroupDescriber | None = None

    def request(self, generation: int) -> None:
        """Ask for a description, tagged with the member's assignment generation."""
        if self._describer is None:
            self._describer = GroupDescriber(self._admin_config, self._group_id, self.topic)
        self._describer.request(generation)

    def result(self, retry_in_s: float) -> tuple[int, GroupDescription] | None:
        """The description that arrived since the last call, if any (never waits)."""
        answer = self._describer.result() if self._describer is not None else None
        if answer is None:
            return None
        generation, description = answer
        if isinstance(description, str):
            log.warning(
                "group %s could not be described (standbys and readiness keep what they had; "
                "asked again in %.0f s): %s",
                self._group_id,
                retry_in_s,
                description,
            )
            return None
        return generation, description

    def describe_now(self, timeout_s: float, stop: threading.Event) -> GroupDescription | None:
        """One description, waited for up to `timeout_s` (or `stop`): before the member joins,
        when nothing else asks. None, logged, when none came."""
        self.request(0)
        assert self._describer is not None
        deadline = time.monotonic() + timeout_s
        while not stop.wait(DESCRIBE_POLL_S):
            answer = self._describer.result()
            if answer is not None:
                description = answer[1]
                if not isinstance(description, str):
                    return description
                log.info("group %s could not be described: %s", self._group_id, description)
                return None
            if time.monotonic() > deadline:
                log.info("group %s: no description within %.0f s", self._group_id, timeout_s)
                return None
        return None

    def partitions_to_warm(self, timeout_s: float, stop: threading.Event) -> set[int] | None:
        """The partitions whose copies this member catches up before it joins
        (`state_restore.warm_up_partitions`), from a description asked now; none without
        standbys, None when the group could not be described within `timeout_s`."""
        if self.standby_replicas < 1:
            return set()
        description = self.describe_now(timeout_s, stop)
        if description is None:
            return None
        return warm_up_partitions(
            _members(description), self.name, self.standby_replicas, description.topic_partitions
        )

    def standbys(self, description: GroupDescription) -> set[int] | None:
        """The partitions whose copies this member keeps, None to keep what it keeps (no
        standbys configured, or a description from before this member joined)."""
        if self.standby_replicas < 1:
            return None
        members = _members(description)
        if not any(m.name == self.name for m in members):
            return None
        return standby_partitions(
            members, self.name, self.standby_replicas, description.topic_partitions
        )

    def close(self) -> None:
        """Stop the describer child, if one was started."""
        if self._describer is not None:
            self._describer.close()


def _members(description: GroupDescription) -> list[Member]:
    """The description's members as the ring of copies knows them."""
    return [Member(m.name, m.partitions) for m in description.members]
