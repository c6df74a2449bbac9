"""Trait types for what admins write in configuration: durations and closed choices.

- :class:`Duration` accepts a number of seconds (``30``, ``1.5``) or a number with a unit
  (``"90s"``, ``"10m"``, ``"4h"``, as :func:`~..units.parse_seconds` reads them) and stores float
  seconds, so code reads ``settings.cull_every`` in seconds and never parses again.
- :class:`ChoiceEnum` is traitlets' ``Enum`` whose refusal names the setting and its values
  (``c.GPUDockerSpawner.attach_mode 'nvidia' is unknown; use one of device_request, cdi, env``);
  ``--help-all`` lists the values as for any ``Enum``.

Both raise :class:`traitlets.TraitError` naming ``c.<Class>.<trait>`` and the accepted forms.
"""

from __future__ import annotations

from typing import Any

from traitlets import Enum, TraitError, TraitType, Undefined

from ..units import UnitError, parse_seconds

__all__ = ["ChoiceEnum", "Duration", "DURATION_FORMS"]

DURATION_FORMS = (
    "a number of seconds (30, 1.5) or a number with a unit: '90s', '30m', '2h', '1.5d', '1w'"
)


def _setting(obj: Any, trait: TraitType) -> str:
    return f"c.{type(obj).__name__}.{trait.name}"


def _to_seconds(value: object, what: str) -> float:
    """``value`` in seconds; :class:`UnitError` with :data:`DURATION_FORMS` otherwise."""
    seconds = parse_seconds(value, what)  # refuses bools, negatives, NaN, unknown units
    if isinstance(value, float):
        return value  # parse_seconds rounds down to whole seconds; keep what was written
    return float(seconds)


class Duration(TraitType):
    """A duration in seconds (float); written as seconds or as ``"90s"``/``"10m"``/``"4h"``.

    ``positive=True`` also refuses 0 (an interval between passes). The default may be written
    either way: ``Duration("1m", positive=True, config=True, help=...)``.
    """

    info_text = "a duration: " + DURATION_FORMS

    def __init__(self, default_value: Any = Undefined, *, positive: bool = False, **kwargs):
        self.positive = positive
        self._written = default_value  # as the help and generated config show it: "1m"
        if default_value is not Undefined and default_value is not None:
            default_value = _to_seconds(default_value, "default duration")
        super().__init__(default_value=default_value, **kwargs)

    def validate(self, obj: Any, value: Any) -> float:
        what = _setting(obj, self)
        try:
            seconds = _to_seconds(value, what)
        except UnitError:
            raise TraitError(
                f"{what} {value!r} is not a duration; write {DURATION_FORMS}"
            ) from None
        if self.positive and seconds <= 0:
            raise TraitError(f"{what} must be longer than 0 s, e.g. '1m'; not {value!r}")
        return seconds

    def from_string(self, s: str) -> str:
        return s  # from the command line ("--GPULabService.cull_every=10m"): validate parses it

    def default_value_repr(self) -> str:
        # valid Python: --generate-config writes "# c.GPULabService.cull_every = '1m'"
        if isinstance(self._written, (int, float)) and not isinstance(self._written, bool):
            return repr(self._written)
        return repr(self._written if self._written is not Undefined else self.default_value)


class ChoiceEnum(Enum):
    """One of a closed set of strings; a refusal names the setting and every value."""

    def validate(self, obj: Any, value: Any) -> Any:
        if self.allow_none and value is None:
            return value
        if value in self.values:
            return value
        raise TraitError(
            f"{_setting(obj, self)} {value!r} is unknown; use one of "
            f"{', '.join(map(repr, self.values))}"
        )
