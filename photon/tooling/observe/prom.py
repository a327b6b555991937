"""Reading the apps' Prometheus endpoints: one scrape, its samples, sums and quantiles.

An app's ``/metrics`` text is parsed with ``prometheus_client``'s own parser
into flat samples (name, labels, value). :meth:`Scrape.total` sums the samples
of a name whose labels match; :meth:`Scrape.quantile` estimates a quantile of
a histogram from its cumulative buckets the way PromQL's
``histogram_quantile`` does (linear inside the bucket; the lowest bucket
starts at 0; a quantile in the ``+Inf`` bucket is the highest finite bound).

How it fails: an endpoint that does not answer within the timeout, or answers
with something that does not parse, gives ``None`` from :func:`scrape` — a
down app is a state to show, not an error.
"""

from __future__ import annotations

import math
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Scrape:
    samples: list[Sample] = field(default_factory=list)

    def matching(self, name: str, **labels: str) -> list[Sample]:
        return [
            s
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def names(self) -> set[str]:
        return {s.name for s in self.samples}

    @classmethod
    def merged(cls, *scrapes: Scrape | None) -> Scrape:
        """The samples of every scrape, each series once: a DC's two apps in one process
        serve the same registry on both of their endpoints."""
        series: dict[tuple[str, tuple[tuple[str, str], ...]], Sample] = {}
        for each in scrapes:
            for sample in each.samples if each is not None else ():
                series.setdefault((sample.name, tuple(sorted(sample.labels.items()))), sample)
        return cls(list(series.values()))

    def total(self, name: str, **labels: str) -> float:
        """The sum of the matching samples (0 when there are none)."""
        return sum(s.value for s in self.matching(name, **labels))

    def quantile(self, histogram: str, q: float, **labels: str) -> float | None:
        """The q-quantile of ``histogram`` over the matching series (None: no observation)."""
        if not 0 <= q <= 1:
            raise ValueError(f"a quantile is between 0 and 1, not {q}")
        buckets: dict[float, float] = {}
        for sample in self.matching(f"{histogram}_bucket", **labels):
            bound = float(sample.labels["le"])
            buckets[bound] = buckets.get(bound, 0.0) + sample.value
        return bucket_quantile(q, sorted(buckets.items()))


def bucket_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """PromQL's histogram_quantile over (upper bound, cumulative count) pairs, sorted."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):  # beyond the highest finite bound: that bound
                return lower_bound
            inside = count - lower_count
            if inside <= 0:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / inside
        lower_bound, lower_count = bound, count
    return lower_bound


def parse(text: str) -> Scrape:
    samples = [
        Sample(s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]
    return Scrape(samples)


def scrape(url: str, timeout_s: float = 2.0) -> Scrape | None:
    """The endpoint's samples, or None when it does not answer (or not in Prometheus text)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (http URL)
            text = response.read().decode("utf-8")
        return parse(text)
    except (OSError, urllib.error.URLError, ValueError):
        return None
