"""Records carrying engine evaluations, for the evaluation-target tests (convert, shards, pipeline, loss).

    from tests.support.evalrecords import EVAL_CSA, EVAL_CSA_EXPECTED, write_eval_csa

EVAL_CSA: one CSA game (White wins) whose `'** <score>` comments (Black's view, as floodgate writes them)
follow moves of both colours, leave one position out and include a mate score each way.
EVAL_CSA_EXPECTED: its evaluation per position, side to move's view (None = no evaluation), worked out by
hand: position i is the position after move i; White is to move in odd positions, so their Black-view
scores change sign; -100000 and 999999 clip to ∓32000 (kifu.evals.MATE_EVAL).
"""

from __future__ import annotations

from pathlib import Path

EVAL_CSA = """V2.2
N+alice
N-bob
PI
+
+7776FU
'** 50 -3334FU
-3334FU
'** -30 +2726FU
+2726FU
-8384FU
'** -100000
+2625FU
'** 120 -8485FU
-8485FU
'** 999999
%TORYO
"""
#                    start  +7776FU  -3334FU  +2726FU  -8384FU  +2625FU  -8485FU
EVAL_CSA_EXPECTED = (None,  -50,     -30,     None,    -32000,  -120,    32000)


def write_eval_csa(path: Path) -> Path:
    """Write EVAL_CSA to `path` and return it."""
    path.write_text(EVAL_CSA, encoding="utf-8")
    return path
