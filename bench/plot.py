"""Lag histograms (PNG, matplotlib: the optional ``bench`` extra) and run context."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def histogram(path: Path, lags_ms: list[float], title: str) -> Path | None:
    """A PNG histogram of tick lags, or None without matplotlib (``pip install .[bench]``)."""
    if not lags_ms:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    ordered = sorted(lags_ms)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    fig, ax = plt.subplots(figsize=(7, 3.5), dpi=100)
    ax.hist(lags_ms, bins=60, color="#3b6ea5")
    ax.axvline(p99, color="#c0392b", linestyle="--", label=f"p99 {p99:.0f} ms")
    ax.set_xlabel("lag: tick start - slot (ms)")
    ax.set_ylabel("ticks")
    ax.set_title(f"{title}: {len(lags_ms)} ticks")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine() -> str:
    return f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs, {platform.platform()}"
