"""`LatencySketch`: how long one step takes, as a mergeable log-bucket histogram with censoring.

A sample is a duration in seconds that either *finished* (the step completed in it) or was
*censored* (the step was cut at it: it would have taken longer). Both go to buckets whose
bounds grow by a factor `GAMMA` (DDSketch's mapping), so every quantile is within
`RELATIVE_ACCURACY` (1 %) of a true sample, whatever the scale. Buckets span 1 µs to 10^5 s in a
fixed array: two arrays of `BUCKETS` counts, 10 KiB each, whatever the number of samples.

Quantiles come from the Kaplan-Meier estimate over the buckets, so a step that is often cut
does not look fast: a censored sample keeps the step "at risk" up to its cut, and a quantile
that falls beyond every finished sample is an `Estimate` marked `at_least`.
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections.abc import Iterable, Mapping
from typing import Any, Final, NamedTuple

__all__ = [
    "BUCKETS",
    "GAMMA",
    "RELATIVE_ACCURACY",
    "Estimate",
    "LatencySketch",
    "bucket_of",
    "empty_counts",
]

RELATIVE_ACCURACY: Final = 0.01
GAMMA: Final = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
_INV_LOG_GAMMA: Final = 1.0 / math.log(GAMMA)
_LO: Final = math.ceil(math.log(1e-6) * _INV_LOG_GAMMA)  # 1 µs and below: the first bucket
_HI: Final = math.ceil(math.log(1e5) * _INV_LOG_GAMMA)  # 10^5 s and above: the last
BUCKETS: Final = _HI - _LO + 1


def bucket_of(seconds: float) -> int:
    """The bucket (0 .. BUCKETS-1) of a duration: `ceil(log_gamma(seconds))`, clamped."""
    if seconds <= 1e-6:
        return 0
    i = math.ceil(math.log(seconds) * _INV_LOG_GAMMA) - _LO
    return i if i < BUCKETS else BUCKETS - 1


def _value_of(bucket: int) -> float:
    """The duration a bucket stands for: within `RELATIVE_ACCURACY` of all it holds."""
    return 2.0 * GAMMA ** (bucket + _LO) / (GAMMA + 1.0)


def empty_counts() -> array[int]:
    """A zeroed count array, one slot per bucket (what a book fills)."""
    return array("q", bytes(8 * BUCKETS))


_NONE: Final = array("q")


class Estimate(NamedTuple):
    """A duration read from a sketch; `at_least` when it lies in the censored tail (the true
    value is this or more: the steps that would tell were cut first)."""

    seconds: float
    at_least: bool = False

    def __str__(self) -> str:
        return f"{'>= ' if self.at_least else ''}{self.seconds:.3g} s"


class LatencySketch:
    """An immutable latency distribution: finished and censored counts per bucket.

    Build one with `LatencySketch.of(finished=[...], censored=[...])`, from a book
    (`LatencyBook.sketch`), or `from_dict`; combine with `merge` (exact: counts add). Reads:
    `quantile(q)`, `p_finish_within(seconds)`, `count`, `finished`, `censored`.
    """

    __slots__ = ("_c", "_curve", "_f", "_lo", "censored", "finished")

    def __init__(self, lo: int = 0, finished: array[int] = _NONE, censored: array[int] = _NONE):
        # Counts of buckets lo, lo+1, ...: private arrays, never changed after this.
        if len(finished) != len(censored):
            raise ValueError("finished and censored counts must cover the same buckets")
        self._lo = lo
        self._f = finished
        self._c = censored
        self.finished = int(sum(finished))
        self.censored = int(sum(censored))
        self._curve: tuple[list[int], list[float]] | None = None

    @classmethod
    def of(cls, *, finished: Iterable[float] = (), censored: Iterable[float] = ()) -> LatencySketch:
        """A sketch of these durations (seconds): steps that finished, steps cut at them."""
        f, c = empty_counts(), empty_counts()
        for s in finished:
            f[bucket_of(s)] += 1
        for s in censored:
            c[bucket_of(s)] += 1
        return cls.of_counts(f, c)

    @classmethod
    def of_counts(cls, finished: array[int], censored: array[int]) -> LatencySketch:
        """A sketch of two full count arrays (`empty_counts()` filled), trimmed to their span."""
        used = [i for i, (f, c) in enumerate(zip(finished, censored, strict=True)) if f or c]
        if not used:
            return cls()
        lo, hi = used[0], used[-1] + 1
        return cls(lo, finished[lo:hi], censored[lo:hi])

    @property
    def count(self) -> int:
        """All samples, finished and censored."""
        return self.finished + self.censored

    @property
    def censored_share(self) -> float:
        """The share of samples that were cut (0 for an empty sketch)."""
        return self.censored / self.count if self.count else 0.0

    def counts(self) -> tuple[array[int], array[int]]:
        """Full count arrays (copies): finished and censored, one slot per bucket."""
        f, c = empty_counts(), empty_counts()
        hi = self._lo + len(self._f)
        f[self._lo : hi] = self._f
        c[self._lo : hi] = self._c
        return f, c

    def merge(self, other: LatencySketch) -> LatencySketch:
        """Both sketches' samples in one (exact, commutative, associative)."""
        if not other.count:
            return self
        if not self.count:
            return other
        lo = min(self._lo, other._lo)
        hi = max(self._lo + len(self._f), other._lo + len(other._f))
        f, c = array("q", bytes(8 * (hi - lo))), array("q", bytes(8 * (hi - lo)))
        for sk in (self, other):
            at = sk._lo - lo
            for j in range(len(sk._f)):
                f[at + j] += sk._f[j]
                c[at + j] += sk._c[j]
        return LatencySketch(lo, f, c)

    def _km(self) -> tuple[list[int], list[float]]:
        """The Kaplan-Meier survival after each bucket holding a sample: (buckets, S)."""
        if self._curve is None:
            at_risk = self.count
            survival = 1.0
            buckets: list[int] = []
            curve: list[float] = []
            for j, (d, c) in enumerate(zip(self._f, self._c, strict=True)):
                if d or c:
                    i = j + self._lo
                    if d:
                        survival *= 1.0 - d / at_risk
                    at_risk -= d + c
                    buckets.append(i)
                    curve.append(survival)
            self._curve = (buckets, curve)
        return self._curve

    def quantile(self, q: float) -> Estimate | None:
        """The duration within which a share `q` of the steps finish (None: no samples).

        Censored samples count as "longer than their cut": when fewer than `q` are known to
        finish by the last sample, the answer is that last sample, `at_least`.

        Raises:
            ValueError: `q` not in [0, 1].
        """
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"q must be in [0, 1], got {q!r}")
        buckets, curve = self._km()
        if not buckets:
            return None
        target = 1.0 - q + 1e-12
        for i, s in zip(buckets, curve, strict=True):
            if s <= target:
                return Estimate(_value_of(i))
        return Estimate(_value_of(buckets[-1]), at_least=True)

    def p_finish_within(self, seconds: float) -> float:
        """The estimated chance that a step finishes within `seconds` (0 for an empty sketch).

        Beyond the last sample of a censored tail this is a lower bound."""
        buckets, curve = self._km()
        k = bisect.bisect_right(buckets, bucket_of(seconds)) - 1 if buckets else -1
        return 0.0 if k < 0 else 1.0 - curve[k]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data: the non-empty buckets (what a store keeps)."""
        return {
            "v": 1,
            "gamma": GAMMA,
            "lo": self._lo,
            "finished": list(self._f),
            "censored": list(self._c),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LatencySketch:
        """Inverse of `to_dict`.

        Raises:
            ValueError: data from another bucket layout (a different `GAMMA`), or malformed.
        """
        if data.get("v") != 1 or not math.isclose(float(data.get("gamma", 0.0)), GAMMA):
            raise ValueError("a latency sketch of another version or bucket layout")
        lo = int(data["lo"])
        f, c = array("q", map(int, data["finished"])), array("q", map(int, data["censored"]))
        if lo < 0 or lo + len(f) > BUCKETS or min((*f, *c), default=0) < 0:
            raise ValueError("a latency sketch with buckets out of range or negative counts")
        return cls(lo, f, c)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LatencySketch):
            return NotImplemented
        return self.counts() == other.counts()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        p50, p99 = self.quantile(0.5), self.quantile(0.99)
        return f"LatencySketch(count={self.count}, censored={self.censored}, p50={p50}, p99={p99})"
