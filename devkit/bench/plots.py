"""The benchmarks' graphs (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import bisect
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # the backend is chosen first

from devkit.bench.measure import TimelineSample
from devkit.truth import OutputRecord

# The processed rate is the committed offset's slope over this many samples (half a second
# each): a batch commits every few seconds, so a shorter span shows only spikes.
RATE_SPAN = 10


def lag_and_output(
    path: Path,
    title: str,
    samples: Sequence[TimelineSample],
    t0: float,
    marks: Mapping[str, float],
    highlight: Sequence[int] = (),
) -> None:
    """Consumer lag per partition (top) and records processed per second per partition (the
    group's committed offsets' slope, bottom), against seconds since `t0`, with vertical lines
    at `marks` (label -> epoch seconds). The restarted instance's partitions are solid lines."""
    fig, (lag_ax, out_ax) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True)
    partitions = sorted({p for s in samples for p in s.lag})
    for p in partitions:
        points = [(s.at, s.lag[p]) for s in samples if p in s.lag]
        style = "-" if p in highlight else ":"
        label = f"partition {p}" + (" (restarted instance)" if p in highlight else "")
        lag_ax.plot([at - t0 for at, _ in points], [lag.lag for _, lag in points], style,
                    label=label)  # fmt: skip
        rates = [
            (b_at - t0, ((b.committed or 0) - (a.committed or 0)) / (b_at - a_at))
            for (a_at, a), (b_at, b) in zip(points, points[RATE_SPAN:], strict=False)
            if b_at > a_at
        ]
        out_ax.plot([x for x, _ in rates], [y for _, y in rates], style, label=label)
    _marked((lag_ax, out_ax), marks, t0)
    lag_ax.set_ylabel("consumer lag (records)")
    out_ax.set_ylabel(f"records processed per s\n(committed offsets, {RATE_SPAN} samples)")
    out_ax.set_xlabel("seconds")
    _saved(fig, lag_ax, title, path)


def _marked(axes: Sequence[plt.Axes], marks: Mapping[str, float], t0: float) -> None:
    """Vertical lines at `marks` (label -> epoch seconds) on every axis, labelled on the first."""
    for label, at in marks.items():
        for ax in axes:
            ax.axvline(at - t0, color="grey", linestyle="--", linewidth=1)
        axes[0].annotate(label, (at - t0, 1), xycoords=("data", "axes fraction"), rotation=90,
                         va="top", ha="right", fontsize=8)  # fmt: skip


def _saved(fig: plt.Figure, top: plt.Axes, title: str, path: Path) -> None:
    """The title and legend on the top axis, the figure written to `path` and closed."""
    # A case's description runs longer than the figure is wide.
    top.set_title(textwrap.fill(title, 110), fontsize=10)
    top.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def output_gaps(
    path: Path,
    title: str,
    records: Sequence[OutputRecord],
    t0: float,
    marks: Mapping[str, float],
    bar_s: float,
) -> None:
    """Per partition, the seconds since its last output record, sampled every 0.25 s: a
    sawtooth whose peaks are the partition's gaps (the time a reader of the table saw nothing
    new), against seconds since `t0`, with `marks` (label -> epoch seconds) and the bar at
    `bar_s` as lines."""
    fig, ax = plt.subplots(figsize=(10, 4.5))
    stamps: dict[int, list[float]] = {}
    for record in records:
        stamps.setdefault(record.partition, []).append(record.timestamp_ms / 1000)
    for p, times in sorted(stamps.items()):
        times.sort()
        grid = [times[0] + 0.25 * k for k in range(int((times[-1] - times[0]) * 4) + 1)]
        ages = [at - times[bisect.bisect_right(times, at) - 1] for at in grid]
        ax.plot([at - t0 for at in grid], ages, label=f"partition {p}", lw=1)
    ax.axhline(bar_s, color="red", linestyle=":", linewidth=1)
    _marked((ax,), marks, t0)
    ax.set_ylabel("seconds since the partition's last output")
    ax.set_xlabel("seconds")
    _saved(fig, ax, title, path)


def throughput_bars(
    path: Path, labels: Sequence[str], rates: Sequence[float], ceiling: float
) -> None:
    """Events per second per configuration, each bar labelled with its rate and its ratio to
    the ceiling (the best plain consume of the run), which is drawn as a line."""
    fig, ax = plt.subplots(figsize=(9, 4.5))
    bars = ax.bar(labels, rates, color="tab:blue")
    ceiling_label = f"ceiling {ceiling:,.0f}/s" if ceiling else "ceiling not measured"
    ax.bar_label(bars, labels=rate_labels(rates, ceiling), padding=3)
    ax.axhline(ceiling, color="tab:red", linestyle="--", label=ceiling_label)
    ax.set_ylabel("events per second (one instance)")
    # Linear from zero: bar heights compare as the rates do.
    ax.set_ylim(0, (max([ceiling, *rates]) or 1.0) * 1.25)
    ax.legend(loc="upper left")
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def rate_labels(rates: Sequence[float], ceiling: float) -> list[str]:
    """A bar's label: its rate, and its ratio to the ceiling when that was measured."""
    return [f"{r:,.0f}/s" + (f" ({r / ceiling:.2f})" if ceiling else "") for r in rates]
