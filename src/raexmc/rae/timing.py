"""Where a prediction's time goes: wall seconds per phase (encode, search, score) over many queries."""

from __future__ import annotations

from dataclasses import dataclass

PHASES = ("encode_s", "search_s", "score_s")


@dataclass
class Timing:
    """Wall seconds spent per phase over `queries` queries."""

    queries: int = 0
    encode_s: float = 0.0
    search_s: float = 0.0
    score_s: float = 0.0

    def add(self, other: Timing) -> None:
        self.queries += other.queries
        for phase in PHASES:
            setattr(self, phase, getattr(self, phase) + getattr(other, phase))

    def per_query_ms(self) -> dict[str, float]:
        n = max(self.queries, 1)
        parts = {phase[:-2]: 1000 * getattr(self, phase) / n for phase in PHASES}
        return {"total": sum(parts.values()), **parts}
