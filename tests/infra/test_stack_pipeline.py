"""The pipeline a stack file names (`contract.stack_pipeline`, what the local run reads
without Pulumi) is the pipeline the program deploys for it: the same names and aggregation for
every stack file, and for a stack file written as `pulumi new` and `pulumi config set` write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from contract.processor_keys import DEFAULTS
from contract.stack_pipeline import (
    PROJECT,
    StackFileError,
    StackPipeline,
    read_stack_pipeline,
    stack_file,
)
from contract.topic_specs import PipelineNames
from infra.config import build_stack_config
from offline.render import ROOT
from tests.infra.conftest import stack_config_of

STACKS = sorted(
    p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in ROOT.glob("Pulumi.*.yaml")
)


def _deployed(stack: str, raw: dict[str, Any]) -> StackPipeline:
    """The names and aggregation the program deploys for these settings."""
    config = build_stack_config(stack, raw)
    return StackPipeline(
        config.names,
        config.processor.properties.get("aggregation.class", DEFAULTS["aggregation.class"]),
    )


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_files_pipeline_reads_as_the_program_deploys_it(stack: str) -> None:
    config = stack_config_of(stack)
    read = read_stack_pipeline(stack_file(ROOT, stack))
    assert read.names == config.names
    assert read.aggregation_class == config.processor.properties.get(
        "aggregation.class", DEFAULTS["aggregation.class"]
    )


def test_names_and_aggregation_set_by_the_cli_read_as_the_program_deploys_them(
    tmp_path: Path,
) -> None:
    # `pulumi new`'s prompts and `pulumi config set` without --path write dotted keys; --path
    # writes nested ones; a dotted key wins over its section.
    config = {
        f"{PROJECT}:profile": "dev",
        f"{PROJECT}:processor": {
            "applicationId": "overridden",
            "properties": {"aggregation.class": "app.pipelines.product_revenue.ProductRevenue"},
        },
        f"{PROJECT}:processor.applicationId": "product-revenue",
        f"{PROJECT}:topics.inputTopic": "orders",
        f"{PROJECT}:topics": {"outputTopic": "revenue-per-product"},
    }
    path = tmp_path / "Pulumi.shop.yaml"
    path.write_text(yaml.safe_dump({"config": config}), encoding="utf-8")
    read = read_stack_pipeline(path)
    assert read == StackPipeline(
        PipelineNames("product-revenue", "orders", "revenue-per-product"),
        "app.pipelines.product_revenue.ProductRevenue",
    )
    raw = {key.removeprefix(f"{PROJECT}:"): value for key, value in config.items()}
    assert read == _deployed("shop", raw)


def test_a_stack_file_that_is_not_there_is_refused_naming_the_stacks_that_are() -> None:
    with pytest.raises(StackFileError, match=r"stack 'nope': no Pulumi\.nope\.yaml .*'dev'"):
        stack_file(ROOT, "nope")
