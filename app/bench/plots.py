"""The benchmarks' graphs (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # the backend is chosen first

from app.bench.measure import TimelineSample
from app.local.observe import CountRecord


def lag_and_output(
    path: Path,
    title: str,
    samples: Sequence[TimelineSample],
    records: Sequence[CountRecord],
    t0: float,
    marks: Mapping[str, float],
    highlight: Sequence[int] = (),
) -> None:
    """Consumer lag per partition (top) and output records per second per partition (bottom),
    against seconds since `t0`, with vertical lines at `marks` (label -> epoch seconds)."""
    fig, (lag_ax, out_ax) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True)
    partitions = sorted({p for s in samples for p in s.lag})
    for p in partitions:
        style = "-" if p in highlight else ":"
        label = f"partition {p}" + (" (restarted instance)" if p in highlight else "")
        lag_ax.plot(
            [s.at - t0 for s in samples],
            [s.lag[p].lag for s in samples if p in s.lag],
            style,
            label=label,
        )
        per_second = Counter(int(r.timestamp_ms / 1000 - t0) for r in records if r.partition == p)
        if per_second:
            xs = list(range(min(per_second), max(per_second) + 1))
            out_ax.plot(xs, [per_second.get(x, 0) for x in xs], style, label=label)
    for label, at in marks.items():
        for ax in (lag_ax, out_ax):
            ax.axvline(at - t0, color="grey", linestyle="--", linewidth=1)
        lag_ax.annotate(
            label,
            (at - t0, 1),
            xycoords=("data", "axes fraction"),
            rotation=90,
            va="top",
            ha="right",
            fontsize=8,
        )
    lag_ax.set_ylabel("consumer lag (records)")
    out_ax.set_ylabel("count records out per s")
    out_ax.set_xlabel("seconds since the load started")
    lag_ax.set_title(title)
    lag_ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def throughput_bars(
    path: Path, labels: Sequence[str], rates: Sequence[float], ceiling: float
) -> None:
    """Events per second per configuration, with the raw consume rate as a line."""
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.bar(labels, rates, color="tab:blue")
    ax.axhline(ceiling, color="tab:red", linestyle="--", label=f"raw consume {ceiling:,.0f}/s")
    ax.set_ylabel("events per second (one instance)")
    ax.set_yscale("log")
    ax.legend()
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
