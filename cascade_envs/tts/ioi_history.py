"""What the ``submit`` strategy tells the policy between rounds: the submission history and insights.

Each round's prompt is the task's own prompt with one block added to its last user message: the
subtasks and what is solved, the submission history (the official verdict per subtask of each
submission, the code of the latest ones), the screening result of a round that submitted nothing,
and the insights of solved subtasks (the accepted code and which subtasks it solved), ending with
the goal of the round (the subtask it aims at).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..core import Message
from ..envs.code.subtasks import Subtask, SubtaskVerdict

CODE_CHARS = 6000
"""The longest code quoted in a prompt (longer code is cut in the middle)."""


@dataclass
class Submission:
    """One submission: where it came from, its code and the official verdict per subtask."""

    index: int
    round: int
    candidate: int
    language: str
    code: str
    verdicts: list[SubtaskVerdict]

    @property
    def points(self) -> float:
        return sum(v.earned for v in self.verdicts)


@dataclass
class History:
    """A task's submissions so far, round notes, and the best result per subtask (IOI rules)."""

    subtasks: Sequence[Subtask]
    budget: int
    submissions: list[Submission] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Rounds that submitted nothing, and why (their screening results)."""

    def solved_by(self) -> dict[str, Submission]:
        """The first accepted submission of each solved subtask."""
        solved: dict[str, Submission] = {}
        for sub in self.submissions:
            for v in sub.verdicts:
                if v.accepted:
                    solved.setdefault(v.name, sub)
        return solved

    def unsolved(self) -> list[Subtask]:
        solved = self.solved_by()
        return [s for s in self.subtasks if s.name not in solved]

    def submitted(self, code: str) -> bool:
        key = _normalise(code)
        return any(_normalise(s.code) == key for s in self.submissions)

    def prompt(
        self, base: list[Message], target: Subtask, *, shown: int = 8, with_code: int = 2
    ) -> list[Message]:
        """``base`` with this history, the insights and the round's goal (aimed at ``target``) added."""
        block = "\n\n".join(
            part
            for part in (
                self._overview(),
                self._history(shown, with_code),
                self._insights(target),
                self._goal(target),
            )
            if part
        )
        messages = [dict(m) for m in base]
        if messages and messages[-1].get("role") == "user" and isinstance(messages[-1].get("content"), str):
            messages[-1]["content"] = f"{messages[-1]['content']}\n\n{block}"
        else:
            messages.append({"role": "user", "content": block})
        return messages

    def _overview(self) -> str:
        solved = self.solved_by()
        lines = [f"## Subtasks (submissions used: {len(self.submissions)} of {self.budget})"]
        for i, s in enumerate(self.subtasks, 1):
            state = "solved" if s.name in solved else "not solved yet"
            lines.append(f"- Subtask {i} ({s.name}, {s.points:g} points): {state}")
        return "\n".join(lines)

    def _history(self, shown: int, with_code: int) -> str:
        if not self.submissions and not self.notes:
            return ""
        lines = ["## Submission history (official verdicts on the hidden tests)"]
        recent = self.submissions[-shown:]
        for sub in recent:
            if not sub.verdicts:
                lines.append(f"### Submission {sub.index} (round {sub.round}): not judged (judging failed)")
                continue
            lines.append(f"### Submission {sub.index} (round {sub.round}): {sub.points:g} points")
            for v in sub.verdicts:
                detail = f" ({v.message})" if v.message and not v.accepted else ""
                lines.append(f"- {v.name}: {v.verdict}{detail}")
            if sub in recent[-with_code:]:
                lines.append(_fenced(sub.language, sub.code))
        lines.extend(f"- {note}" for note in self.notes[-3:])
        return "\n".join(lines)

    def _insights(self, target: Subtask) -> str:
        solved = self.solved_by()
        if not solved:
            return ""
        by_code: dict[int, tuple[Submission, list[str]]] = {}
        for name, sub in solved.items():
            by_code.setdefault(sub.index, (sub, []))[1].append(name)
        lines = ["## Insights from solved subtasks"]
        for sub, names in by_code.values():
            lines.append(
                f"Submission {sub.index} was accepted on: {', '.join(names)}. Its code, which "
                f"handles those cases correctly:\n{_fenced(sub.language, sub.code)}"
            )
        return "\n".join(lines)

    def _goal(self, target: Subtask) -> str:
        solved = [s.name for s in self.subtasks if s.name in self.solved_by()]
        keep = f" while keeping the solved subtasks ({', '.join(solved)}) correct" if solved else ""
        return (
            f"## Goal of this round\nWrite a complete, efficient program that is accepted on "
            f"the subtask {target.name} ({target.points:g} points){keep}. Put it in one fenced code "
            "block at the end of your answer."
        )


def _normalise(code: str) -> str:
    return "\n".join(line.rstrip() for line in code.strip().splitlines() if line.strip())


def _fenced(language: str, code: str) -> str:
    if len(code) > CODE_CHARS:
        code = code[: CODE_CHARS // 2] + "\n... (cut) ...\n" + code[-CODE_CHARS // 2 :]
    fence = "````" if "```" in code else "```"
    return f"{fence}{language}\n{code.rstrip()}\n{fence}"
