"""Feed validation shared by every runner, so a wrong feed fails the same clear way everywhere."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from engines.base import Feed


def check_feed(feed: Feed, input_names: Iterable[str]) -> None:
    expected = list(input_names)
    missing = [n for n in expected if n not in feed]
    extra = [n for n in feed if n not in expected]
    if missing or extra:
        raise ValueError(f"feed has inputs {sorted(feed)}; engine expects {expected}"
                         + (f" (missing {missing})" if missing else "") + (f" (unexpected {extra})" if extra else ""))
    batches = {n: np.shape(feed[n])[0] if np.ndim(feed[n]) else None for n in expected}
    if len(set(batches.values())) > 1:
        raise ValueError(f"feed inputs disagree on batch size: {batches}")
