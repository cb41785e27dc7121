"""The Prometheus text format (0.0.4), written straight from the scrape's data.

``prometheus_client.generate_latest`` re-validates and re-escapes every label name of
every sample: two thirds of a 10,000-job scrape went there. Here label names are ours
(constants, or checked by ``nexopoll.core.metricrules`` before they were stored), so
each label set is rendered once, values escaped (``\\``, ``"``, newline), and each
sample is one f-string. Numbers are written as ``prometheus_client`` writes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client.utils import floatToGoString


def escape(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def num(value: float) -> str:
    """``floatToGoString``, with a fast path for the small integers counters mostly are."""
    if type(value) is int and 0 <= value < 1_000_000:
        return f"{value}.0"
    return floatToGoString(value)


class Family:
    """One metric family: its ``# HELP`` and ``# TYPE`` lines and its samples."""

    def __init__(self, name: str, kind: str, doc: str, labels: Sequence[str] = ()) -> None:
        self.name, self.kind, self.labels = name, kind, tuple(labels)
        self.sample = name + "_total" if kind == "counter" else name
        doc = doc.replace("\\", "\\\\").replace("\n", "\\n")
        self.lines = [f"# HELP {self.sample} {doc}", f"# TYPE {self.sample} {kind}"]
        # the label set with a {} per value (str.format: one call per sample)
        self._inner = ",".join(f'{n}="{{}}"' for n in self.labels)

    def add(self, values: Iterable[str], value: float) -> None:
        inner = self._inner.format(*map(escape, values))
        self.lines.append(
            f"{self.sample}{{{inner}}} {num(value)}" if inner else f"{self.sample} {num(value)}"
        )

    def add_raw(self, labels: str, value: float) -> None:
        """A sample whose label set (``{…}``) the caller rendered and escaped."""
        self.lines.append(f"{self.sample}{labels} {num(value)}")

    def add_histogram(
        self, values: Iterable[str], buckets: Sequence[tuple[str, float]], total: float
    ) -> None:
        """``buckets``: cumulative ``(le, count)`` pairs, the last ``+Inf``."""
        inner = self._inner.format(*map(escape, values))
        lead = f"{self.name}_bucket{{{inner},le=" if inner else f"{self.name}_bucket{{le="
        self.lines += [f'{lead}"{le}"}} {num(n)}' for le, n in buckets]
        braces = f"{{{inner}}}" if inner else ""
        self.lines.append(f"{self.name}_count{braces} {num(buckets[-1][1])}")
        self.lines.append(f"{self.name}_sum{braces} {num(total)}")


def render(families: Iterable[Family]) -> bytes:
    return "".join("\n".join(f.lines) + "\n" for f in families).encode("utf-8")
