"""Control flow of the stage kinds, executed directly on the typed graph; each kind's executor lives in
`engine/kinds/` (keyed by the kind's name), this module dispatches and owns the rules shared by all.

Decisions (docs/design/canvas.md, "Stage kinds" and "Execution"; this module records the choices in detail):
- A stage fails when its last executed node failed; a parallel stage fails only when every branch failed.
  A failed node never changes the state, so its error can never become the answer.
- Parallel: branches run concurrently on the same state. Candidates = the texts of the successful branches
  in branch order. A branch whose operator already occurred earlier in the same stage is a sampled draw
  (sampling temperature, its own derived seed), so `Programmer | Programmer` yields two different programs;
  the first occurrence stays greedy.
- Samples (`samples: k` on a node): the node behaves like k parallel branches of itself: draw 1 greedy,
  draws 2..k sampled with distinct seeds (node_call.py), all on the same input. An operator stage with k > 1
  is therefore run as a parallel stage: its k outputs become candidates for the next stage (an ensemble
  such as ScEnsemble votes over them) and the greedy draw, when it succeeded, is the current solution. A
  parallel branch with k > 1 contributes its k outputs in place. Inside a conditional or a loop a node has
  no stage after it that could see candidates, so validation refuses samples > 1 there; the engine runs
  only the greedy draw if one gets through. The state then continues as if the first successful non-guidance branch had run alone
  (its text is the current solution), plus the guidance of any planner branches. An ensemble stage after a
  parallel is what actually selects or combines; candidates are visible to exactly that next stage.
- Conditional `C ? F : P`: F runs only when C reports a failed check (verdict False). A check that gave
  no verdict, because it had none (None) or because C itself failed, takes the pass branch and its trace
  row says so: the design runs F only after a failed check (docs/design/canvas.md, "Stage kinds"), and F
  would otherwise revise blind, without feedback (measured with Qwen2.5-Coder-0.5B on GSM8K: such blind
  revisions turned correct answers wrong).
  F and P see the state after C (so Revise receives C's feedback). The untaken branch gets a trace row with skipped=True.
- Loop: the body runs up to `count` times; when the body holds a checker, the loop stops after the first
  iteration whose last checker ran successfully with verdict True. Trace rows carry the 1-based iteration.
- Fallback `A ?? B`: B runs only when A failed or produced no answer; otherwise B gets a skipped row.
"""

from __future__ import annotations

from flowsteer_mcp.canvas.execution import NodeTrace
from flowsteer_mcp.canvas.model import Stage
from flowsteer_mcp.engine.kinds import EXECUTORS, StageOutcome, branch_draws
from flowsteer_mcp.engine.node_call import NodeCaller
from flowsteer_mcp.engine.state import FlowState


class StageRunner:
    def __init__(self, caller: NodeCaller) -> None:
        self._caller = caller

    async def run(self, stage: Stage, state: FlowState, sink: list[NodeTrace]) -> StageOutcome:
        outcome = await EXECUTORS[stage.kind](stage, state, sink, self._caller)
        if not outcome.offers_candidates:
            # Candidates of a parallel stage are meant for the one stage right after it.
            outcome.state = outcome.state.without_candidates()
        return outcome


__all__ = ["StageOutcome", "StageRunner", "branch_draws"]
