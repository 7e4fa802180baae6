"""The policy pack as `pulumi policy publish` takes it: the pack's directory, the contract inside.

    python -m policies.bundle build/policy-pack
    cd build/policy-pack && pulumi policy publish <organization>

The CLI uploads the pack's directory alone, and the rules import the contract the program and
the processor share (`contract/`, beside the pack in the repository). The bundle holds both,
and `policies/__main__.py` finds the contract in either place.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

PACK_DIR = Path(__file__).resolve().parent
CONTRACT_DIR = PACK_DIR.parent / "contract"
# What a local run leaves in the pack's directory: the CLI's pack environment and bytecode.
LEFT_OUT = shutil.ignore_patterns("__pycache__", "venv")


def bundle(out: Path) -> Path:
    """Write the publishable pack to `out` (a new directory) and return it."""
    if out.exists():
        raise FileExistsError(f"{out} exists; the bundle goes into a new directory")
    shutil.copytree(PACK_DIR, out, ignore=LEFT_OUT)
    shutil.copytree(CONTRACT_DIR, out / "contract", ignore=LEFT_OUT)
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m policies.bundle <dir>`: the publishable pack in `<dir>`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="a directory that does not exist yet")
    args = parser.parse_args(argv)
    try:
        written = bundle(args.out)
    except FileExistsError as exc:
        print(f"policies.bundle: {exc}", file=sys.stderr)
        return 2
    print(f"policy pack with its contract in {written}: cd there and `pulumi policy publish`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
