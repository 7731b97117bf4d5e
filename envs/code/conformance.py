"""``cascade/Code-v0``'s conformance case (``cascade_envs.testing.check_env``): a bundled row and its bad variants."""

from typing import Any

from ...data import read_rows
from ...testing import Case

ROW = next(row for _, row in read_rows("bundled:code/samples.jsonl"))
SUM = (
    "```python\nimport sys\nd = sys.stdin.read().split()\nt = int(d[0])\n"
    "print('\\n'.join(str(int(d[1 + 2 * i]) + int(d[2 + 2 * i])) for i in range(t)))\n```"
)


def tests_row(
    inputs: list[Any], outputs: list[Any], fn_name: str | None = None, **meta: Any
) -> dict[str, Any]:
    """A row with these unit tests (and ``verifier_metadata`` extras)."""
    tests = {"inputs": inputs, "outputs": outputs, **({"fn_name": fn_name} if fn_name else {})}
    return {
        "responses_create_params": {"input": [{"role": "user", "content": "Solve it."}]},
        "verifier_metadata": {"unit_tests": tests, **meta},
    }


CASE = Case(
    good_row=ROW,
    good_answer=f"<think>Python ints are unbounded.</think>{SUM}",
    bad_answer="```python\nprint(0)\n```",
    bad_rows=[
        ({"responses_create_params": {"input": "x"}}, "verifier_metadata"),
        ({"prompt": "x", "verifier_metadata": {"unit_tests": "none"}}, "verifier_metadata.unit_tests"),
        (tests_row(["1"], ["1", "2"]), "verifier_metadata.unit_tests"),
        (tests_row([1], ["1"]), "verifier_metadata.unit_tests.inputs"),
        (tests_row(["1"], ["1"], fn_name="not an id"), "verifier_metadata.unit_tests.fn_name"),
        (tests_row(["{"], ["1"], fn_name="f"), "verifier_metadata.unit_tests"),
        (tests_row(["1"], ["1"], checker={"language": "java", "source": "x"}), "verifier_metadata.checker"),
        (tests_row(["1"], ["1"], time_limit_s=-1), "verifier_metadata.time_limit_s"),
        (tests_row(["1"], ["1"], languages=["rust"]), "verifier_metadata.languages"),
    ],
    env_kwargs={"time_limit_s": 5.0},
)
