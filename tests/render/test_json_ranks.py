"""The rank lines of ``--format json``: written field by field, the same text json's encoder writes."""

from __future__ import annotations

import json

import pytest

from nccl_logsift.model import Evidence, RankState
from nccl_logsift.render.json import _rank, _rank_line

# What json escapes (quotes, backslashes, control characters) and what it leaves (DEL, non-ASCII, U+2028).
QUOTED = Evidence('logs/"a"\\b.log', 12, 'tab\there " back\\slash \x00\x1f\x7f é ☃ \u2028 \ud83d\ude00')


@pytest.mark.parametrize(
    "state",
    [
        RankState(3, "node-1", 4242, "0x1a2b", "AllReduce", 17, 16, Evidence("job.log", 9, "NCCL INFO ...")),
        RankState(None, None, None, None, None, None, None, None),
        RankState(0, "nöde\n2", -1, "n8#0", "Send", 0, -1, QUOTED),
        RankState(2**63 - 1, "", 0, "", "", 2**40, None, Evidence("", 0, "")),
    ],
)
def test_a_rank_line_is_what_json_writes_for_the_rank_state(state):
    assert _rank_line(state) == json.dumps(_rank(state), ensure_ascii=False)
