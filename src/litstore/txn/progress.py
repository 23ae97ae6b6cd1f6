"""Progress of a write: a tqdm bar when the caller asked for one, nothing at all otherwise.

``tqdm(disable=True)`` still starts tqdm's monitor thread the first time a process makes
a bar (5-25 ms measured in a fresh process's first append, a third of a 100-record
append to a large store); a write that was not asked for progress makes none.
"""

from __future__ import annotations

from typing import Any

from tqdm.auto import tqdm


class _Silent:
    """What a write updates when nobody watches."""

    def update(self, count: int = 1) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def bar(shown: bool, **options: Any) -> Any:
    """A tqdm bar with ``options`` if ``shown``, else an object that takes its updates and shows nothing."""
    return tqdm(**options) if shown else _Silent()
