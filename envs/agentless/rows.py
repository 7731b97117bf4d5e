"""Task rows of the agentless env, three layouts, each loaded unchanged into one of three specs.

- Repair rows written for this project (``data/samples.jsonl``): ``problem_statement``, ``files``
  (``{path: content}``), ``gold_files`` (the files the fix touches: the gold localisation),
  ``retrieved_files`` (ranked retrieval results, optional), ``patch`` (the reference fix, a
  git-style diff), optional ``instance_id`` and ``repo``. The prompt shows the gold files and the
  ``top_k`` first retrieved ones, sorted by path so that the order does not give the gold away.
- NeMo Gym ``swerl_gen`` rows: ``instance`` (SWE-bench fields: ``instance_id``,
  ``problem_statement``, ``patch``, ...), ``metadata`` (``relevant_file_contents``: a JSON object
  of ``{path: content}``, ``remove_repo_name``, ``image``), ``mode`` and the prompt in
  ``responses_create_params``. ``mode: eval`` is a repair (the row's prompt asks for the edits in
  a ``<solution>`` block, so they must be there); ``mode: repro-gen`` asks for a reproduction test.
- NeMo Gym ``swerl_llm_judge`` rows: the prompt shows candidate fixes and the model picks one:
  ``options`` (``[{letter: patch}, ...]``), ``expected_answer`` (a letter, or a list of them),
  ``grading_mode`` (``strict`` or ``lenient``, upstream's default).

The env's task (``AgentlessTask``) is the row's spec and the prompt the model sees: the row's own
(NeMo Gym rows), or the one the env writes from the spec (this project's repair rows).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Any

from cascade_envs.core import Row, TaskError
from cascade_envs.data import Prompt, decode_json_field

from .patches import PatchError, apply_patch, parse_patch
from .similarity import normalized_change

MAX_FILE_CHARS = 1_000_000
MAX_FILES = 64
_BINARY = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
GRADING_MODES = ("strict", "lenient")


@dataclass(frozen=True)
class RepairSpec:
    """A repair task: the issue, the files the model may edit, and the reference fix."""

    issue: str
    files: dict[str, str]
    reference_patch: str
    reference: dict[str, str]
    """The reference change of each file it touches, in the similarity reward's normal form."""
    solution_tags: bool = False
    """The edits must sit in a ``<solution>`` block (the row's prompt asks for one)."""
    strip_repo_folder: bool = False
    """File keys start with the repository's folder, which patches leave out (``remove_repo_name``)."""
    shown: tuple[str, ...] | None = None
    """Files the env's own prompt shows, in order; ``None`` when the row brings its prompt."""
    repo: str = ""

    def diff_path(self, key: str) -> str:
        """The path a patch uses for the file ``key``."""
        return patch_path(key, self.strip_repo_folder)


def patch_path(key: str, strip_repo_folder: bool) -> str:
    """The path a patch uses for the file ``key`` (without its first folder when ``strip_repo_folder``)."""
    return key.split("/", 1)[-1] if strip_repo_folder else key


@dataclass(frozen=True)
class ReproSpec:
    """A ``repro-gen`` task: write a test that reproduces the issue; only running it can score it."""

    instance_id: str
    image: str


@dataclass(frozen=True)
class ChoiceSpec:
    """A ``swerl_llm_judge`` task: pick the letter of the correct fix."""

    letters: tuple[str, ...]
    gold: tuple[str, ...]
    grading_mode: str = "lenient"


Spec = RepairSpec | ReproSpec | ChoiceSpec


@dataclass(frozen=True)
class AgentlessTask:
    """The env's task: the prompt the model sees and the spec that scores its answer."""

    prompt: Prompt
    spec: Spec


def load_row(row: Row, top_k: int) -> tuple[Prompt | None, Spec]:
    """The row's own prompt (``None`` for this project's repair rows, whose prompt the env writes) and
    its spec; ``TaskError`` names the field at fault."""
    if "options" in row:
        return Prompt.of(row), _choice(row)
    if "instance" in row:
        return Prompt.of(row), _swerl_gen(row)
    if "files" in row:
        return None, _own_repair(row, top_k)
    raise TaskError(
        "not an agentless row: expected 'files' (a repair row), 'instance' (NeMo Gym swerl_gen) "
        "or 'options' (NeMo Gym swerl_llm_judge)"
    )


def _text(row: dict[str, Any], name: str, where: str | None = None) -> str:
    value = row.get(name)
    if not isinstance(value, str) or not value.strip():
        raise TaskError("must be non-empty text", where or name)
    return value


def _check_files(files: Any, where: str) -> dict[str, str]:
    if not isinstance(files, dict) or not files:
        raise TaskError("must be a non-empty object of {path: content}", where)
    if len(files) > MAX_FILES:
        raise TaskError(f"{len(files)} files, over the {MAX_FILES} a task may show", where)
    for path, content in files.items():
        if (
            not isinstance(path, str)
            or not path
            or path.startswith("/")
            or ".." in path.split("/")
            or posixpath.normpath(path) != path
        ):
            raise TaskError(f"{path!r} is not a normal relative path", where)
        if not isinstance(content, str):
            raise TaskError(f"the content of {path} must be text, got {type(content).__name__}", where)
        if len(content) > MAX_FILE_CHARS:
            raise TaskError(f"{path} has {len(content)} characters, over the {MAX_FILE_CHARS} allowed", where)
        if _BINARY.search(content):
            raise TaskError(f"{path} holds binary content", where)
    return files


def reference_changes(
    files: dict[str, str], patch: str, strip_repo_folder: bool, where: str
) -> dict[str, str]:
    """Apply the reference ``patch`` to ``files``: each touched file's change in normal form."""
    keys = {patch_path(key, strip_repo_folder): key for key in files}
    changes: dict[str, str] = {}
    try:
        for file_patch in parse_patch(patch):
            name = file_patch.old or file_patch.new
            assert name is not None
            key = keys.get(name)
            if key is None and file_patch.old is not None:
                raise TaskError(f"the patch changes {name}, which is not among the task's files", where)
            old = files[key] if key is not None else ""
            new = apply_patch({name: old}, file_patch)
            change = normalized_change(old, new)
            if change:
                changes[key or name] = change
    except PatchError as exc:
        raise TaskError(f"the reference patch does not apply to the task's files: {exc}", where) from None
    if not changes:
        raise TaskError("the reference patch changes nothing", where)
    return changes


def _own_repair(row: dict[str, Any], top_k: int) -> RepairSpec:
    issue = _text(row, "problem_statement")
    files = _check_files(row.get("files"), "files")
    gold = _path_list(row, "gold_files", files, required=True)
    retrieved = _path_list(row, "retrieved_files", files, required=False)
    shown = sorted(set(gold) | set(retrieved[:top_k]))
    patch = _text(row, "patch")
    reference = reference_changes(files, patch, False, "patch")
    outside = sorted(set(reference) - set(gold))
    if outside:
        raise TaskError(
            f"the reference patch changes {outside}, which gold_files does not list", "gold_files"
        )
    repo = row.get("repo", "")
    if not isinstance(repo, str):
        raise TaskError("must be text", "repo")
    shown_files = {path: files[path] for path in shown}
    return RepairSpec(issue, shown_files, patch, reference, shown=tuple(shown), repo=repo)


def _path_list(row: dict[str, Any], name: str, files: dict[str, str], *, required: bool) -> list[str]:
    value = row.get(name)
    if value is None and not required:
        return []
    if not isinstance(value, list) or (required and not value) or not all(isinstance(p, str) for p in value):
        raise TaskError("must be a list of file paths" + (" (at least one)" if required else ""), name)
    missing = [p for p in value if p not in files]
    if missing:
        raise TaskError(f"{missing[:3]} not in 'files'", name)
    return list(dict.fromkeys(value))


def _swerl_gen(row: dict[str, Any]) -> RepairSpec | ReproSpec:
    instance, metadata = row.get("instance"), row.get("metadata")
    if not isinstance(instance, dict):
        raise TaskError("must be an object (the SWE-bench instance)", "instance")
    if not isinstance(metadata, dict):
        raise TaskError("must be an object (relevant_file_contents, remove_repo_name, image)", "metadata")
    mode = row.get("mode", "eval")
    instance_id = _text(instance, "instance_id", "instance.instance_id")
    if mode == "repro-gen":
        image = metadata.get("image")
        return ReproSpec(instance_id, image if isinstance(image, str) else "")
    if mode != "eval":
        raise TaskError(
            f"unknown mode {mode!r:.40}; NeMo Gym's swerl_gen knows 'eval' and 'repro-gen'", "mode"
        )
    files = decode_json_field(metadata.get("relevant_file_contents"), "metadata.relevant_file_contents")
    files = _check_files(files, "metadata.relevant_file_contents")
    strip = metadata.get("remove_repo_name", False)
    if not isinstance(strip, bool):
        raise TaskError("must be true or false", "metadata.remove_repo_name")
    issue = _text(instance, "problem_statement", "instance.problem_statement")
    patch = _text(instance, "patch", "instance.patch")
    reference = reference_changes(files, patch, strip, "instance.patch")
    return RepairSpec(
        issue,
        files,
        patch,
        reference,
        solution_tags=True,
        strip_repo_folder=strip,
        repo=str(instance.get("repo", "")),
    )


def _choice(row: dict[str, Any]) -> ChoiceSpec:
    options = row.get("options")
    if not isinstance(options, list) or not options:
        raise TaskError("must be a non-empty list of {letter: fix} objects", "options")
    letters: list[str] = []
    for entry in options:
        if not isinstance(entry, dict) or len(entry) != 1:
            raise TaskError(
                f"each option must be one {{letter: fix}} pair, got {str(entry)[:60]!r}", "options"
            )
        (letter,) = entry
        if not (isinstance(letter, str) and len(letter) == 1 and letter.isalpha()):
            raise TaskError(f"option keys must be single letters, got {letter!r:.20}", "options")
        letters.append(letter.upper())
    expected = row.get("expected_answer")
    answers = [expected] if isinstance(expected, str) else expected
    if not isinstance(answers, list) or not answers:
        raise TaskError("must be an option letter or a list of them", "expected_answer")
    gold = [a.strip().upper() for a in answers if isinstance(a, str)]
    if not gold or any(g not in letters for g in gold):
        raise TaskError(
            f"must be among the option letters {letters}, got {expected!r:.40}", "expected_answer"
        )
    mode = row.get("grading_mode") or "lenient"
    if mode not in GRADING_MODES:
        raise TaskError(f"unknown mode {mode!r:.40}; choose from {list(GRADING_MODES)}", "grading_mode")
    return ChoiceSpec(tuple(letters), tuple(dict.fromkeys(gold)), mode)
