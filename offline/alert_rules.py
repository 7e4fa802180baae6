"""Print a stack's alerting rules as a Prometheus rule file, for a Prometheus without the operator.

    python -m offline.alert_rules --stack prod > stateful-streaming-rules.yaml

The same rules `pulumi up` deploys as a PrometheusRule with `processor.metricsScrape:
podMonitor` (`infra/alert_rules.py`), with the thresholds of `Pulumi.<stack>.yaml`'s settings.
Exit codes: 0 printed, 2 a stack file or setting that cannot be read (the message says which).
"""

from __future__ import annotations

import argparse
import sys

import yaml

from infra.alert_rules import alert_rules
from infra.config import stack_config_from_cli
from infra.stack_settings import StackConfigError
from offline.render import load_stack_file


class _RuleFileDumper(yaml.SafeDumper):
    """Multi-line strings (expressions) as literal blocks, as rule files are written by hand."""


_RuleFileDumper.add_representer(
    str,
    lambda dumper, text: dumper.represent_scalar(
        "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None
    ),
)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m offline.alert_rules", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--stack", required=True, help="stack name: Pulumi.<stack>.yaml")
    args = parser.parse_args(argv)
    try:
        config = stack_config_from_cli(args.stack, load_stack_file(args.stack))
    except StackConfigError as exc:
        print(f"offline.alert_rules: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(f"# python -m offline.alert_rules --stack {args.stack}\n")
    yaml.dump(alert_rules(config), sys.stdout, Dumper=_RuleFileDumper, sort_keys=False, width=100)
    return 0


if __name__ == "__main__":
    sys.exit(main())
