"""Reading Prometheus's text format in tests: ``samples(text)`` -> ``{(name, labels): value}``."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of an exposition ``text``, keyed by ``(name, frozenset(labels.items()))``."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(found: dict, name: str, **labels) -> float | None:
    """The sample ``name{labels}`` in ``found`` (:func:`samples`), ``None`` when absent."""
    return found.get((name, frozenset(labels.items())))
