"""Run ``logsift analyze`` with every row order polars leaves unspecified made arbitrary (seeded shuffles).

``python tests/polars_shuffled.py SEED PATH...`` prints one JSON line per PATH: the findings contract and the
HTML report's views. A SEED of 0 runs plain polars. Used by tests/test_determinism.py in a subprocess, since
it patches polars for the whole process.

What is shuffled, for calls made from the diagnosis (findings, views, the communicator resolver): the rows of
a join, group_by, or unique without ``maintain_order``, the groups a group_by iterates, the rows a
``keep="any"`` unique keeps, the order of equal keys of a sort without ``maintain_order``, and the values of
``unique()`` and ``mode()``. Polars' threads make each of these vary from run to run (and with
POLARS_MAX_THREADS); the output must not depend on any of them.
"""

from __future__ import annotations

import json
import random
import sys
import traceback

import polars as pl
from polars.dataframe.group_by import GroupBy

SHUFFLED = (
    "nccl_logsift/findings/",
    "nccl_logsift/views/",
    "nccl_logsift/resolve/communicators.py",
    "nccl_logsift/resolve/exits.py",
)
_rng = random.Random(0)


def _ours() -> bool:
    """Whether the innermost nccl_logsift frame calling polars is one whose orders are checked."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        name = frame.filename.replace("\\", "/")
        if "nccl_logsift/" in name:
            return any(part in name for part in SHUFFLED)
    return False


def _seed() -> int:
    return _rng.randrange(1 << 30)


def _shuffled(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sample(fraction=1.0, shuffle=True, seed=_seed()) if frame.height > 1 else frame


def patch(seed: int) -> None:
    _rng.seed(seed)
    join, unique, sort, agg, groups = (
        pl.DataFrame.join,
        pl.DataFrame.unique,
        pl.DataFrame.sort,
        GroupBy.agg,
        GroupBy.__iter__,
    )
    s_unique, e_unique, s_mode, e_mode = pl.Series.unique, pl.Expr.unique, pl.Series.mode, pl.Expr.mode

    def join_(self, *args, maintain_order=None, **kwargs):
        out = join(self, *args, maintain_order=maintain_order, **kwargs)
        loose = maintain_order in (None, "none") and kwargs.get("how") not in ("semi", "anti")
        return _shuffled(out) if loose and _ours() else out

    def unique_(self, subset=None, *, keep="any", maintain_order=False):
        if not _ours():
            return unique(self, subset, keep=keep, maintain_order=maintain_order)
        if keep == "any" and subset is not None and not maintain_order:
            return _shuffled(unique(_shuffled(self), subset, keep="first"))
        out = unique(self, subset, keep="first" if keep == "any" else keep, maintain_order=maintain_order)
        return out if maintain_order else _shuffled(out)

    def sort_(self, by, *more, maintain_order=False, **kwargs):
        if not maintain_order and _ours():
            return sort(_shuffled(self), by, *more, maintain_order=True, **kwargs)
        return sort(self, by, *more, maintain_order=maintain_order, **kwargs)

    def agg_(self, *args, **kwargs):
        out = agg(self, *args, **kwargs)
        return out if self.maintain_order or not _ours() else _shuffled(out)

    def groups_(self):
        items = groups(self)
        if self.maintain_order or not _ours():
            return items
        items = list(items)
        _rng.shuffle(items)
        return iter(items)

    def s_unique_(self, *, maintain_order=False):
        out = s_unique(self, maintain_order=maintain_order)
        return out.shuffle(_seed()) if not maintain_order and len(out) > 1 and _ours() else out

    def e_unique_(self, *, maintain_order=False):
        if maintain_order or not _ours():
            return e_unique(self, maintain_order=maintain_order)
        return e_unique(self, maintain_order=True).shuffle(_seed())

    def s_mode_(self, *args, **kwargs):
        out = s_mode(self, *args, **kwargs)
        return out.shuffle(_seed()) if len(out) > 1 and _ours() else out

    def e_mode_(self, *args, **kwargs):
        out = e_mode(self, *args, **kwargs)
        return out.shuffle(_seed()) if _ours() else out

    pl.DataFrame.join, pl.DataFrame.unique, pl.DataFrame.sort = join_, unique_, sort_
    GroupBy.agg, GroupBy.__iter__ = agg_, groups_
    pl.Series.unique, pl.Expr.unique, pl.Series.mode, pl.Expr.mode = s_unique_, e_unique_, s_mode_, e_mode_


def main(seed: int, paths: list[str]) -> None:
    if seed:
        patch(seed)
    from nccl_logsift.pipeline import analyze
    from nccl_logsift.render.json import to_dict

    for path in paths:
        report = analyze([path])
        print(
            json.dumps(
                {
                    "path": path,
                    "json": to_dict(report),
                    "views": repr(report.views),
                    "notes": list(report.notes),
                }
            )
        )


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:])
