"""The checks behind tests/test_docs.py: the conventions every page of README.md and docs/ follows.

Each ``check_*`` function takes a page's path (as shown in messages) and its text or fenced blocks and
returns a list of error lines (empty: the page passes). ``python -m tests.docs_check`` is the
validator of training-config YAML blocks, run in a subprocess of its own because reading a mix
registers env aliases in the process that reads it (``cascade_envs.mix.parse_mix``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import tomllib
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LANGUAGES = ("python", "bash", "yaml", "text", "toml", "json")
PYTHON_TIMEOUT_S = 120.0
SNIPPET = re.compile(r"""^-{1,3}8<-{1,3}\s+(["'])(?P<path>[^"']+)\1\s*$""")
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
CONFIG_SECTIONS = ("model", "mix", "rollout", "optim", "train", "heldout", "mopd", "ray")
WHOLE_CONFIG_WITH_MIX = ("model", "rollout", "optim", "train")


@dataclass(frozen=True)
class Block:
    """A fenced code block: its language (the info string's first word), its text with the fence's
    indentation removed, and ``line``, the 1-based page line of the opening fence (the code starts on
    the next line)."""

    lang: str
    code: str
    line: int

    @property
    def snippet(self) -> str | None:
        """The path of a block that is only a ``--8<-- "path"`` include line, else ``None``."""
        lines = [line for line in self.code.splitlines() if line.strip()]
        match = SNIPPET.match(lines[0].strip()) if len(lines) == 1 else None
        return match.group("path") if match else None


def fenced_blocks(text: str) -> tuple[list[Block], list[str]]:
    """The fenced blocks of a Markdown text, and errors for fences that are never closed."""
    blocks: list[Block] = []
    errors: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening or (opening["fence"][0] == "`" and "`" in opening["info"]):
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = FENCE.match(lines[j])
            if (
                closing
                and closing["fence"][0] == fence[0]
                and len(closing["fence"]) >= len(fence)
                and not closing["info"].strip()
            ):
                break
            line = lines[j]
            strip = min(indent, len(line) - len(line.lstrip(" \t")))
            body.append(line[strip:])
            j += 1
        else:
            errors.append(f"line {i + 1}: a fenced block is never closed")
        info = opening["info"].strip()
        lang = info.split()[0].strip("{}.").lower() if info else ""
        blocks.append(Block(lang, "\n".join(body) + "\n", i + 1))
        i = j + 1
    return blocks, errors


def check_languages(page: str, blocks: list[Block]) -> list[str]:
    """Every fenced block names one of ``LANGUAGES`` (so no Python hides from the runner as ``py``)."""
    return [
        f"{page}:{b.line}: fenced block with language {b.lang or '(none)'!r}; use one of {', '.join(LANGUAGES)}"
        for b in blocks
        if b.lang not in LANGUAGES
    ]


def check_snippets(page: str, blocks: list[Block], root: Path = ROOT) -> list[str]:
    """An include line (``--8<-- "path"``) is the whole block and names a file that exists."""
    errors = []
    for b in blocks:
        includes = [line for line in b.code.splitlines() if SNIPPET.match(line.strip())]
        if not includes:
            continue
        path = b.snippet
        if path is None:
            errors.append(f"{page}:{b.line}: a --8<-- include line must be the block's only content")
        elif not (root / path).is_file() and not (root / path.split(":")[0]).is_file():
            errors.append(f"{page}:{b.line}: --8<-- includes {path}, which does not exist")
    return errors


# ----- bash --------------------------------------------------------------------------------------


def _strip_comment(line: str) -> str:
    """``line`` without its shell comment: a ``#`` outside quotes that starts a word."""
    quote = ""
    escaped = False
    for i, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1] in " \t;&|()"):
            return line[:i]
    return line


SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")", ";;", "|&"}
REDIRECT = re.compile(r"^\d*(>|>>|<|<<|<<<|>&|<&|&>|&>>|>\|)$")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
HEREDOC = re.compile(r"""(?<!<)<<-?(?!<)\s*(['"]?)([A-Za-z_]\w*)\1""")
PYTHON = re.compile(r"^(?:.*/)?python(?:3(?:\.\d+)?)?$")


def shell_commands(code: str) -> Iterator[tuple[int, list[str]]]:
    """``(line offset in code, argv)`` of each simple command of a bash block: ``\\`` continuations
    joined, comments dropped, split at ``&&``, ``||``, ``;``, ``|``, ``&`` and parentheses, leading
    ``VAR=value`` assignments, a ``$`` prompt and redirections removed, here-documents skipped."""
    lines = code.splitlines()
    i = 0
    while i < len(lines):
        start, text = i, lines[i]
        while text.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text.rstrip()[:-1] + " " + lines[i]
        i += 1
        text = _strip_comment(text)
        heredoc = HEREDOC.search(text)
        if heredoc:  # its body is data, not commands
            while i < len(lines) and lines[i].strip() != heredoc.group(2):
                i += 1
            i += 1
        text = re.sub(r"(?<![^\s;&|(])\d+(?=[<>])", " ", text)  # 2>&1: the fd is no argument
        lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = ""
        try:
            tokens = list(lexer)
        except ValueError as exc:  # an unclosed quote
            yield start, ["<unparsable>", str(exc)]
            continue
        argv: list[str] = []
        skip_next = False
        for token in [*tokens, ";"]:
            if skip_next:
                skip_next = False
            elif token in SEPARATORS:
                while argv and (ASSIGNMENT.match(argv[0]) or argv[0] == "$"):
                    argv.pop(0)
                if argv:
                    yield start, argv
                argv = []
            elif REDIRECT.match(token):
                skip_next = True
            else:
                argv.append(token)


def _is_cascade_envs(argv: list[str]) -> list[str] | None:
    """The arguments after the program when ``argv`` runs the cascade-envs CLI, else ``None``."""
    if argv[0] == "cascade-envs" or argv[0].endswith("/cascade-envs"):
        return argv[1:]
    if PYTHON.match(argv[0]) and argv[1:3] in (["-m", "cascade_envs"], ["-m", "cascade_envs.cli"]):
        return argv[3:]
    return None


def parse_cli(args: list[str]) -> str | None:
    """``None`` when ``cascade-envs ARGS`` parses with the real CLI parser, else argparse's message."""
    from cascade_envs.cli import build_parser

    parser = build_parser()
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(args)
    except SystemExit as exc:
        if exc.code not in (0, None):
            lines = [line for line in err.getvalue().splitlines() if line.strip()]
            return lines[-1] if lines else f"exit {exc.code}"
    return None


def check_bash(page: str, blocks: list[Block], root: Path = ROOT) -> list[str]:
    """cascade-envs commands parse with ``cascade_envs.cli.build_parser()``; ``python bench/X.py`` and
    ``python examples/X.py`` name files that exist."""
    errors = []
    for b in blocks:
        if b.lang != "bash" or b.snippet:
            continue
        for offset, argv in shell_commands(b.code):
            line = b.line + 1 + offset
            if argv[0] == "<unparsable>":
                errors.append(f"{page}:{line}: cannot split the command: {argv[1]}")
                continue
            args = _is_cascade_envs(argv)
            if args is not None:
                problem = parse_cli(args)
                if problem:
                    errors.append(
                        f"{page}:{line}: `cascade-envs {shlex.join(args)}` does not parse: {problem}"
                    )
            elif PYTHON.match(argv[0]):
                errors += _missing_scripts(page, line, argv[1:], root)
    return errors


def _missing_scripts(page: str, line: int, args: list[str], root: Path) -> list[str]:
    scripts = [a for a in args if re.fullmatch(r"(?:\./)?(?:bench|examples)/[\w./-]+\.py", a)]
    return [f"{page}:{line}: {s} does not exist" for s in scripts[:1] if not (root / s).is_file()]


def check_prose_scripts(page: str, text: str, root: Path = ROOT) -> list[str]:
    """``python bench/X.py`` / ``python examples/X.py`` written in the page's prose (inline code in a
    table or a sentence) names a file that exists."""
    errors = []
    skip = code_lines(text)
    for number, line in enumerate(text.splitlines(), 1):
        if number in skip:
            continue
        for match in re.finditer(r"\bpython3?\s+((?:bench|examples)/[\w./-]+\.py)\b", line):
            if not (root / match.group(1)).is_file():
                errors.append(f"{page}:{number}: {match.group(1)} does not exist")
    return errors


# ----- yaml, toml, json -----------------------------------------------------------------------


def config_kind(data: Any) -> str | None:
    """What a YAML block is to the trainer: ``pipeline`` (a top-level ``stages:``), ``config`` (a whole
    run config: ``mix:`` plus a model/rollout/optim/train section), ``fragment`` (some sections of one),
    ``mix`` (a ``--mix`` file: ``envs:``), or ``None`` (something else)."""
    if not isinstance(data, dict):
        return None
    if "stages" in data:
        return "pipeline"
    if "mix" in data and any(key in data for key in WHOLE_CONFIG_WITH_MIX):
        return "config"
    if any(key in data for key in CONFIG_SECTIONS):
        return "fragment"
    if "envs" in data:
        return "mix"
    return None


def check_data_blocks(page: str, blocks: list[Block]) -> tuple[list[str], list[dict[str, Any]]]:
    """YAML, TOML and JSON blocks parse; returns the errors and the YAML blocks the trainer's loaders
    must check (``{"page", "line", "kind", "text"}``, for ``validate_configs``)."""
    import yaml

    errors: list[str] = []
    configs: list[dict[str, Any]] = []
    for b in blocks:
        if b.snippet:
            continue
        try:
            if b.lang == "yaml":
                data = yaml.safe_load(b.code)
                kind = config_kind(data)
                if kind:
                    configs.append({"page": page, "line": b.line, "kind": kind, "text": b.code})
            elif b.lang == "toml":
                tomllib.loads(b.code)
            elif b.lang == "json":
                json.loads(b.code)
        except (yaml.YAMLError, tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
            message = " ".join(str(exc).split())
            errors.append(f"{page}:{b.line}: the {b.lang} block does not parse: {message}")
    return errors, configs


def validate_configs(configs: list[dict[str, Any]], timeout_s: float = 120.0) -> list[str]:
    """Errors of the trainer's own loaders on config blocks, run in a fresh process (see module doc)."""
    if not configs:
        return []
    with tempfile.TemporaryDirectory(prefix="docs-yaml-") as folder:
        proc = subprocess.run(
            [sys.executable, "-m", "tests.docs_check"],
            input=json.dumps(configs),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=folder,
            env={**os.environ, **offline_env(), "PYTHONPATH": str(ROOT)},
        )
    if proc.returncode != 0:
        return [f"the config validator failed (exit {proc.returncode}):\n{tail(proc.stderr)}"]
    return list(json.loads(proc.stdout))


def _config_error(block: dict[str, Any], folder: Path) -> str | None:
    """The trainer's error on one config block (run in the validator process), else ``None``.

    A whole config goes through ``validate`` (every section's check and the cross-section rules) with
    its teacher checkpoints read as ``embedded``: the pages name placeholder folders (/ckpt/sft) that
    cannot be loaded here. A fragment is built as a ``Config`` (every key and value type checked) and
    its own sections checked. A pipeline goes through ``load_pipeline``, and each stage that names a
    shipped config is built with its ``set:`` overrides. A mix file goes through ``load_mix_file``.
    """
    import yaml

    from cascade_envs.core import CascadeError
    from cascade_envs.mix import load_mix_file
    from cascade_envs.trainer import cascade
    from cascade_envs.trainer.config import Config
    from cascade_envs.trainer.typed_yaml import build

    data = yaml.safe_load(block["text"])
    path = folder / f"block{block['line']}.yaml"
    path.write_text(block["text"], encoding="utf-8")
    try:
        if block["kind"] == "config":
            _validate(data)
        elif block["kind"] == "fragment":
            config = build(Config, data)
            for name in CONFIG_SECTIONS:
                if name in data:
                    getattr(config, name).check()
        elif block["kind"] == "pipeline":
            pipeline = cascade.load_pipeline(path)
            for stage in pipeline.stages:
                ref = stage.config
                if "/" in ref or ref.endswith((".yaml", ".yml")):
                    continue  # a file of the reader's: only shipped configs can be built here
                try:
                    _validate(cascade.stage_data(pipeline, stage, "embedded"))
                except CascadeError as exc:
                    raise CascadeError(f"stage {stage.name} (config {ref}): {exc}") from None
        elif block["kind"] == "mix":
            load_mix_file(path)
    except CascadeError as exc:
        return f"{block['page']}:{block['line']}: the {block['kind']} YAML is refused by the trainer: {exc}"
    except Exception as exc:  # the loader itself failed on this block: say so, check the others
        return f"{block['page']}:{block['line']}: loading the {block['kind']} YAML raised {type(exc).__name__}: {exc}"
    return None


def _validate(data: dict[str, Any]) -> None:
    """``validate`` a whole config, its MOPD teachers read as ``embedded`` (pages name placeholder
    checkpoint folders, and ``auto``, which only a pipeline resolves)."""
    from cascade_envs.trainer.checks import validate
    from cascade_envs.trainer.config import Config
    from cascade_envs.trainer.typed_yaml import build

    config = build(Config, data)
    config.mopd.teachers = {env_id: "embedded" for env_id in config.mopd.teachers}
    if config.mopd.default_teacher is not None:
        config.mopd.default_teacher = "embedded"
    validate(config)


def _validator_main() -> int:
    """Reads the blocks as JSON on stdin, writes their errors as a JSON list; run in an empty folder."""
    blocks = json.loads(sys.stdin.read())
    errors = [error for block in blocks if (error := _config_error(block, Path.cwd()))]
    print(json.dumps(errors))
    return 0


# ----- python ----------------------------------------------------------------------------------


def offline_env() -> dict[str, str]:
    return {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def page_script(blocks: list[Block], timeout_s: float) -> str | None:
    """The python blocks of a page as one script whose line numbers are the page's (each block's code
    sits on its own lines of the page, blank lines between), or ``None`` when the page has none.
    Line 1 arms ``faulthandler`` to print where the script is when the page's time runs out."""
    python = [b for b in blocks if b.lang == "python" and not b.snippet]
    if not python:
        return None
    lines = [f"import faulthandler; faulthandler.dump_traceback_later({max(timeout_s - 5, 1):g}, exit=True)"]
    for b in python:
        lines += [""] * (b.line - len(lines))
        lines += b.code.rstrip("\n").splitlines()
    return "\n".join(lines) + "\n"


def run_python(
    page: str, blocks: list[Block], tmp_path: Path, timeout_s: float = PYTHON_TIMEOUT_S
) -> list[str]:
    """Run the page's python blocks in order in one fresh interpreter (``sys.executable``), working
    directory a fresh folder under ``tmp_path``, offline; an error names the block and its line."""
    script = page_script(blocks, timeout_s)
    if script is None:
        return []
    folder = tmp_path / "script"
    work = tmp_path / "work"
    folder.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    path = folder / (page.replace("/", "__") + ".py")
    path.write_text(script, encoding="utf-8")
    env = {**os.environ, **offline_env()}
    env.pop("PYTHONPATH", None)
    try:
        proc = subprocess.run(
            [sys.executable, str(path)], cwd=work, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        return [f"{page}: the python blocks ran past {timeout_s:g} s\n{tail(stderr)}"]
    if proc.returncode == 0:
        return []
    where = _failing_block(path, proc.stderr, blocks)
    timed_out = "Timeout (" in proc.stderr and "Thread" in proc.stderr
    what = f"ran past {timeout_s - 5:g} s" if timed_out else f"failed (exit {proc.returncode})"
    return [f"{page}: {where} {what}; stderr:\n{tail(proc.stderr)}"]


def _failing_block(script: Path, stderr: str, blocks: list[Block]) -> str:
    """``python block at line N (page line M)``: the block holding the top-level statement that was
    running (the script's ``<module>`` frame; for a syntax error, the line it names)."""
    name = re.escape(str(script))
    frames = re.findall(rf'File "{name}", line (\d+),? in <module>', stderr) or re.findall(
        rf'File "{name}", line (\d+)', stderr
    )
    if not frames:
        return "the python blocks"
    line = int(frames[-1])
    starts = [b.line for b in blocks if b.lang == "python" and not b.snippet and b.line < line]
    return f"python block at line {starts[-1]} (page line {line})" if starts else f"page line {line}"


# ----- links -----------------------------------------------------------------------------------


def code_lines(text: str) -> set[int]:
    """The page lines (1-based) of fenced blocks, fences included."""
    lines: set[int] = set()
    for b in fenced_blocks(text)[0]:
        lines.update(range(b.line, b.line + b.code.count("\n") + 2))
    return lines


def slugify(value: str, separator: str = "-") -> str:
    """Python-Markdown's ``toc`` slug of a heading text (the mkdocs default)."""
    value = unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode("ascii")
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(rf"[{separator}\s]+", separator, value)


def github_slug(value: str) -> str:
    """GitHub's anchor of a heading text (README.md's own links are followed on GitHub)."""
    return re.sub(r"[^\w\- ]", "", value.strip().lower()).replace(" ", "-")


def heading_text(markdown: str) -> str:
    """The plain text of a heading's Markdown, as ``toc`` sees it: code spans' content, link texts."""
    text = re.sub(r"\s*\{[^}]*\}\s*$", "", markdown)  # attr_list
    text = re.sub(r"`+([^`]*)`+", r"\1", text)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"(\*\*|__|\*)", "", text)
    return text.strip()


def anchors(text: str, github: bool = False) -> set[str]:
    """The anchors of a page: heading slugs (duplicates numbered ``_1``, ``_2`` as ``toc`` does),
    ``{#id}`` attributes and HTML ``id``/``name`` attributes. Headings in code blocks do not count.
    ``github``: GitHub's heading anchors too (duplicates numbered ``-1``, ``-2``)."""
    inside = code_lines(text)
    found: set[str] = set()
    github_found: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        if number in inside:
            continue
        match = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            custom = re.search(r"\{[^}]*#([\w-]+)[^}]*\}\s*$", match.group(1))
            slug = custom.group(1) if custom else slugify(heading_text(match.group(1)))
            unique, n = slug, 0
            while unique in found:
                n += 1
                unique = f"{slug}_{n}"
            found.add(unique)
            if github:
                slug = github_slug(heading_text(match.group(1)))
                unique, n = slug, 0
                while unique in github_found:
                    n += 1
                    unique = f"{slug}-{n}"
                github_found.add(unique)
        found.update(re.findall(r"""<[^>]+\b(?:id|name)=["']([^"']+)["']""", line))
    return found | github_found


LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def check_links(page: str, text: str, root: Path = ROOT) -> list[str]:
    """Relative links (and images) of a page outside code: the target exists, and a ``#anchor`` exists in a
    Markdown target (mkdocs' slugs) or in the page itself for ``#anchor`` alone (mkdocs' or GitHub's)."""
    skip = code_lines(text)
    base = (root / page).parent
    errors = []
    cache: dict[Path, set[str]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if number in skip:
            continue
        plain = re.sub(r"`[^`]*`", "", line)
        for target in LINK.findall(plain) + re.findall(r"^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)", plain):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue  # http:, mailto: ...
            path_part, _, anchor = target.partition("#")
            if not path_part:
                if anchor not in cache.setdefault(Path(page), anchors(text, github=True)):
                    errors.append(f"{page}:{number}: link to {target}: no anchor #{anchor} in this page")
                continue
            target_path = (base / path_part).resolve()
            if not target_path.exists():
                errors.append(f"{page}:{number}: link to {target}: {path_part} does not exist")
                continue
            if anchor and target_path.suffix == ".md":
                if target_path not in cache:
                    cache[target_path] = anchors(target_path.read_text(encoding="utf-8"))
                if anchor not in cache[target_path]:
                    errors.append(f"{page}:{number}: link to {target}: no anchor #{anchor} in {path_part}")
    return errors


if __name__ == "__main__":
    sys.exit(_validator_main())
