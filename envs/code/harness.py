"""The function-call driver: runs a LeetCode-style solution on one test inside the sandbox.

It reads the arguments (one JSON value per line) from stdin, loads ``solution.py``, calls
``fn_name`` (a method of ``Solution()`` when the code defines that class, else a module-level
function) and prints the JSON of the return value after a marker line on stdout. Anything the
solution itself prints goes to stderr, so it cannot be mistaken for the result.
"""

from __future__ import annotations

import json

DRIVER_NAME = "_driver.py"
SOLUTION_NAME = "solution.py"
RESULT_MARKER = "\x1e__cascade_result__\x1e"

DRIVER = r"""
import json, sys
marker = __MARKER__
args = [json.loads(line) for line in sys.stdin.read().split("\n") if line.strip()]
real_stdout, sys.stdout = sys.stdout, sys.stderr
namespace = {"__name__": "solution", "__builtins__": __builtins__}
with open("solution.py") as fh:
    source = fh.read()
exec(compile(source, "solution.py", "exec"), namespace)
target = namespace.get("Solution")
fn = getattr(target(), sys.argv[1], None) if isinstance(target, type) else None
fn = fn or namespace.get(sys.argv[1])
if not callable(fn):
    sys.stderr.write("no function named " + repr(sys.argv[1]) + " in the solution\n")
    sys.exit(3)
result = fn(*args)
if isinstance(result, (set, frozenset)):
    result = sorted(result)
real_stdout.write(marker + "\n" + json.dumps(result, default=repr) + "\n")
real_stdout.flush()
""".replace("__MARKER__", repr(RESULT_MARKER))


def parse_result(stdout: str) -> tuple[bool, object]:
    """``(True, value)`` from the driver's output, or ``(False, reason)``."""
    _, sep, tail = stdout.rpartition(RESULT_MARKER + "\n")
    if not sep:
        return False, "the function returned no result"
    try:
        return True, json.loads(tail)
    except (ValueError, RecursionError):  # not JSON, an int too long to read, nesting too deep
        return False, "the result is not JSON-serialisable"
