"""What a stack file says of the pipeline, its names and its aggregation, read without Pulumi.

The Pulumi program reads the whole stack (`infra.config`); the local run and the tools run in
the application's environment, which has no Pulumi, and read only this part, so that a stack's
`processor.applicationId`, `topics.inputTopic`, `topics.outputTopic` and
`processor.properties.aggregation.class` (what `pulumi new`'s prompts and `pulumi config set`
write) name the local pipeline too. A test holds both readings equal for every stack file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .processor_keys import DEFAULTS
from .topic_specs import PipelineNames

# The namespace of the program's settings (`stateful-streaming:processor`, ...) and the package
# of its components' type tokens: it stays when a fork renames the project (`pulumi new --name`),
# since a type token is part of every resource's URN.
PROJECT = "stateful-streaming"


class StackFileError(ValueError):
    """A stack file that cannot be read, or whose pipeline settings have the wrong shape."""


@dataclass(frozen=True)
class StackPipeline:
    """The pipeline a stack runs: its names and its `aggregation.class`."""

    names: PipelineNames
    aggregation_class: str


def stack_file(project_dir: Path, stack: str) -> Path:
    """`Pulumi.<stack>.yaml` of the project; refused, with the stacks there are, if missing."""
    path = project_dir / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        known = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml")
                       for p in project_dir.glob("Pulumi.*.yaml"))  # fmt: skip
        raise StackFileError(f"stack {stack!r}: no {path.name} in {project_dir}; stacks: {known}")
    return path


def read_stack_pipeline(path: Path) -> StackPipeline:
    """The pipeline `path` (a stack file) sets, the defaults where it sets nothing."""
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    config = document.get("config") or {}
    processor = _section(config, "processor", path)
    topics = _section(config, "topics", path)
    properties = processor.get("properties") or {}
    if isinstance(properties, str):  # `pulumi config set` without --path: the map as JSON
        properties = json.loads(properties)
    if not isinstance(properties, Mapping):
        raise StackFileError(f"{path.name}: processor.properties must be a map of names to values")
    defaults = PipelineNames()
    return StackPipeline(
        names=PipelineNames(
            str(processor.get("applicationId", defaults.application_id)),
            str(topics.get("inputTopic", defaults.input_topic)),
            str(topics.get("outputTopic", defaults.output_topic)),
        ),
        aggregation_class=str(properties.get("aggregation.class", DEFAULTS["aggregation.class"])),
    )


def _section(config: Mapping[str, Any], name: str, path: Path) -> dict[str, Any]:
    """A settings section, nested (`--path`) and dotted (`section.setting`) keys merged, the
    dotted ones last, as the program merges them."""
    section: dict[str, Any] = {}
    for key, value in config.items():
        setting = key.removeprefix(f"{PROJECT}:")
        if setting == name:
            if not isinstance(value, Mapping):
                raise StackFileError(f"{path.name}: {key} must be a map of settings")
            section = {**dict(value), **section}
        elif setting.startswith(f"{name}."):
            section[setting.removeprefix(f"{name}.")] = value
    return section
