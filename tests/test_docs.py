"""The docs cannot rot: every page of README.md and docs/ follows the conventions its examples rely on.

One test per page (``test_page[docs/x.md]``): its fenced blocks name a known language; its python
blocks run in order in one fresh interpreter (offline, in an empty folder, 120 s for the page);
its ``cascade-envs`` commands parse with the real CLI parser and the bench/examples scripts it runs
exist; its YAML/TOML/JSON parses, and its training configs, pipelines and mix files pass the
trainer's own loaders; its ``--8<--`` includes exist. Plus the README's own rules (the Quick start's
two commands and the markers .ci/run reads, links into docs/), the CLI's help epilogs, and tests of
the checker itself (tests/docs_check.py), so that it cannot silently pass everything.
"""

from __future__ import annotations

import functools
import re
import sys
import textwrap
from pathlib import Path

import pytest

from tests import docs_check
from tests.docs_check import (
    ROOT,
    Block,
    check_bash,
    check_data_blocks,
    check_languages,
    check_links,
    check_prose_scripts,
    check_snippets,
    fenced_blocks,
    run_python,
    validate_configs,
)

README = ROOT / "README.md"
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]


def page_errors(
    page: str, text: str, tmp_path: Path, root: Path = ROOT, config_errors: list[str] | None = None
) -> list[str]:
    """Every convention's errors for one page (its python blocks run last, after the static checks).
    ``config_errors``: the trainer's verdicts on the page's config blocks when already known."""
    blocks, unclosed = fenced_blocks(text)
    errors = [f"{page}: {error}" for error in unclosed]
    errors += check_languages(page, blocks)
    errors += check_snippets(page, blocks, root)
    errors += check_bash(page, blocks, root)
    errors += check_prose_scripts(page, text, root)
    data_errors, configs = check_data_blocks(page, blocks)
    errors += data_errors + (validate_configs(configs) if config_errors is None else config_errors)
    errors += run_python(page, blocks, tmp_path)
    return errors


@functools.cache
def all_config_errors() -> dict[str, list[str]]:
    """The trainer's verdicts on every page's config blocks, by page: one validator process per test
    worker (it imports torch) instead of one per page."""
    configs = []
    for page in PAGES:
        configs += check_data_blocks(page, fenced_blocks((ROOT / page).read_text(encoding="utf-8"))[0])[1]
    by_page: dict[str, list[str]] = {block["page"]: [] for block in configs}
    for error in validate_configs(configs):
        page = error.split(":", 1)[0]
        for where in [page] if page in by_page else by_page:  # a validator crash fails every such page
            by_page[where].append(error)
    return by_page


@pytest.mark.parametrize("page", PAGES)
def test_page(page, tmp_path):
    text = (ROOT / page).read_text(encoding="utf-8")
    errors = page_errors(page, text, tmp_path, config_errors=all_config_errors().get(page, []))
    assert not errors, "\n".join(errors)


# ----- the README ------------------------------------------------------------------------------


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def test_quick_start_has_exactly_two_commands():
    text = _readme()
    assert "## Quick start" in text, "README.md has no '## Quick start' section"
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = [b.code for b in fenced_blocks(quick)[0] if b.lang == "bash"]
    assert len(commands) == 2 and all(c.strip().count("\n") == 0 for c in commands), commands
    assert commands[0].strip().endswith("cascade-envs train") and "pytest" in commands[1]


@pytest.mark.parametrize("marker", ["main-command", "test-command"])
def test_ci_markers_hold_one_bash_block(marker):
    """.ci/run reads the test command from between these markers (the main command is the Quick start's)."""
    found = re.findall(rf"<!-- {marker} -->\n(.*?)<!-- /{marker} -->", _readme(), flags=re.DOTALL)
    assert len(found) == 1, f"README.md needs exactly one <!-- {marker} --> ... <!-- /{marker} --> pair"
    blocks = fenced_blocks(found[0])[0]
    assert [b.lang for b in blocks] == ["bash"] and blocks[0].code.strip(), found[0]


def test_readme_links_resolve():
    """Relative links of the README exist, their #anchors too (mkdocs checks the docs' own links)."""
    errors = check_links("README.md", _readme())
    assert not errors, "\n".join(errors)


# ----- the CLI's help --------------------------------------------------------------------------


def test_every_command_help_names_an_existing_docs_page():
    from cascade_envs.cli import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.choices and isinstance(a.choices, dict))
    helps = {"cascade-envs": parser, **{f"cascade-envs {n}": p for n, p in subparsers.choices.items()}}
    errors = []
    for name, command in helps.items():
        match = re.fullmatch(r"docs: (\S+?)(?:#([\w-]+))?", command.epilog or "")
        if not match:
            errors.append(f"{name} --help: epilog {command.epilog!r} is not 'docs: PAGE'")
        elif not (ROOT / match[1]).is_file():
            errors.append(f"{name} --help names {match[1]}, which does not exist")
        elif match[2] and match[2] not in docs_check.anchors((ROOT / match[1]).read_text(encoding="utf-8")):
            errors.append(f"{name} --help names {match[0][6:]}, a heading {match[1]} does not have")
        elif "docs: " not in command.format_help().splitlines()[-1]:
            errors.append(f"{name} --help does not end with its docs line")
    assert not errors, "\n".join(errors)


# ----- the checker itself ----------------------------------------------------------------------


def _page(markdown: str) -> tuple[list[Block], str]:
    text = textwrap.dedent(markdown)
    return fenced_blocks(text)[0], text


def test_checker_finds_a_wrong_flag_after_prefixes_and_splits():
    blocks, _ = _page(
        """
        # T

        ```bash
        cascade-envs eval --env cascade/MCQA-v0 --limit 2      # fine
        CASCADE_ENVS_DEBUG=1 .venv/bin/cascade-envs eval \\
            --no-such-flag 3 &
        cd x && cascade-envs trian | tee log 2>&1
        python -m cascade_envs list --json; cascade-envs serve-judge --port 8011 &
        $ cascade-envs info
        ```
        """
    )
    errors = check_bash("t.md", blocks)
    assert len(errors) == 3, errors
    assert errors[2].startswith("t.md:10:") and "ID" in errors[2]  # info's env id is required
    assert errors[0].startswith("t.md:6:") and "--no-such-flag" in errors[0]
    assert errors[1].startswith("t.md:8:") and "trian" in errors[1]


def test_checker_finds_missing_scripts_languages_and_includes(tmp_path):
    blocks, text = _page(
        """
        Run `python bench/bench_missing.py` for the numbers.

        ```bash
        python bench/bench_tts.py --tasks 2
        python examples/not_there.py
        ```

        ```py
        print("hidden from the runner")
        ```

        ```python
        --8<-- "examples/not_there.py"
        ```
        """
    )
    assert check_bash("t.md", blocks) == ["t.md:6: examples/not_there.py does not exist"]
    assert check_prose_scripts("t.md", text) == ["t.md:2: bench/bench_missing.py does not exist"]
    assert [e.split(":")[1] for e in check_languages("t.md", blocks)] == ["9"]
    assert ["--8<-- includes examples/not_there.py" in e for e in check_snippets("t.md", blocks)] == [True]
    assert run_python("t.md", blocks, tmp_path) == []  # neither the py nor the include block runs


def test_checker_runs_python_blocks_as_one_script_and_names_the_failing_block(tmp_path):
    blocks, _ = _page(
        """
        # T

        ```python
        import os
        x = 41
        open("made_here.txt", "w").close()
        ```

        Text between blocks.

        ```python
        assert os.environ["HF_HUB_OFFLINE"] == "1" and os.listdir(".") == ["made_here.txt"]
        assert x + 1 == 42
        raise RuntimeError(f"boom {x}")
        ```
        """
    )
    errors = run_python("t.md", blocks, tmp_path)
    assert len(errors) == 1 and errors[0].startswith("t.md: python block at line 12 (page line 15) failed")
    assert "boom 41" in errors[0]
    blocks, _ = _page("```python\nimport time\ntime.sleep(30)\n```\n")
    errors = run_python("t.md", blocks, tmp_path / "slow", timeout_s=8)
    assert len(errors) == 1 and "python block at line 1 (page line 3) ran past 3 s" in errors[0], errors


def test_checker_refuses_bad_yaml_and_configs_the_trainer_refuses():
    blocks, _ = _page(
        """
        ```yaml
        model: {path: /ckpt/sft}
        mix: {envs: {cascade/MCQA-v0: 1.0}}
        rollout: {group_sise: 8}
        ```

        ```yaml
        rollout: {engine: ray, engine_kwargs: {backend: vllm}}
        train: {world_size: 2, launcher: ray}
        mopd: {eps_low: 0.5}
        ```

        ```yaml
        mopd: {eps_hihg: 2.0}
        ```

        ```yaml
        envs:
          cascade/MCQA-v0: {wieght: 0.5}
        ```

        ```yaml
        model: {path: /ckpt/sft}
        stages:
          - {name: if_rl, config: if_rl, set: ["train.stesp=2"]}
          - {name: mopd, config: mopd}
        ```

        ```yaml
        key: [unclosed
        ```

        ```toml
        [project
        ```
        """
    )
    errors, configs = check_data_blocks("t.md", blocks)
    assert [e.split(":")[1] for e in errors] == ["30", "34"], errors
    assert [c["kind"] for c in configs] == ["config", "fragment", "fragment", "mix", "pipeline"]
    refused = validate_configs(configs)
    assert len(refused) == 4, refused
    assert "t.md:2:" in refused[0] and "rollout.group_sise" in refused[0]
    assert "t.md:14:" in refused[1] and "mopd.eps_hihg" in refused[1]
    assert "t.md:18:" in refused[2] and "wieght" in refused[2]
    assert "t.md:23:" in refused[3] and "stage if_rl" in refused[3] and "train.stesp" in refused[3]


def test_checker_resolves_links_and_anchors(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(
        "# Page A\n\n## `cascade-envs eval`: the CLI\n\n```bash\n# not a heading\n```\n## Twice\n## Twice\n"
    )
    text = textwrap.dedent(
        """
        # Readme

        ## Quick start

        [ok](docs/a.md#cascade-envs-eval-the-cli) [ok](docs/a.md#twice_1) [ok](#quick-start)
        [bad](docs/a.md#not-a-heading) [bad](docs/b.md) [bad](#gone) [web](https://example.com/#x)
        `[not a link](docs/none.md)`
        """
    )
    errors = check_links("README.md", text, tmp_path)
    assert [e.split(": ", 1)[1] for e in errors] == [
        "link to docs/a.md#not-a-heading: no anchor #not-a-heading in docs/a.md",
        "link to docs/b.md: docs/b.md does not exist",
        "link to #gone: no anchor #gone in this page",
    ]


def test_checker_finds_an_unclosed_fence_and_a_missing_image(tmp_path):
    text = "# T\n\n![plot](docs/assets/none.png)\n\n```python\nprint(1)\n"
    errors = page_errors("t.md", text, tmp_path)
    assert errors[0] == "t.md: line 5: a fenced block is never closed", errors
    assert check_links("README.md", text) == [
        "README.md:3: link to docs/assets/none.png: docs/assets/none.png does not exist"
    ]


def test_checker_passes_a_page_that_follows_the_conventions(tmp_path):
    text = textwrap.dedent(
        """
        # Fine

        ```bash
        cascade-envs eval --env cascade/MCQA-v0 --limit 2 -o runs/x.jsonl 2>&1 | tail -3
        python bench/bench_tts.py --tasks 2   # a real script
        cat > notes.txt <<'EOF'
        it's data: cascade-envs --not-checked
        EOF
        $ cascade-envs list --json
        ```

        1. In a list:

            ```python
            print(sum(range(4)))  # 6
            ```

        ```yaml
        rollout: {group_size: 4, prompts_per_step: 2}
        ```

        ```text
        6
        ```
        """
    )
    assert page_errors("fine.md", text, tmp_path) == []
    assert sys.executable  # the blocks ran with the test's own interpreter


def test_the_pages_hold_what_the_checks_check():
    """A parser that found no blocks would pass every page: the docs do hold python blocks that run,
    cascade-envs commands that parse, and YAML configs the trainer loads."""
    blocks = [b for page in PAGES for b in fenced_blocks((ROOT / page).read_text(encoding="utf-8"))[0]]
    python = [b for b in blocks if b.lang == "python" and not b.snippet]
    commands = [
        argv
        for b in blocks
        if b.lang == "bash"
        for _, argv in docs_check.shell_commands(b.code)
        if docs_check._is_cascade_envs(argv) is not None
    ]
    configs = check_data_blocks("all", blocks)[1]
    assert len(PAGES) > 20 and len(python) >= 5 and len(commands) >= 10 and len(configs) >= 3, (
        len(PAGES),
        len(python),
        len(commands),
        len(configs),
    )
