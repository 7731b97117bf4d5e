"""An IOI-style code row shared by the subtask tests and the ``submit`` strategy's tests.

n -> 2n; subtask "n < 100" (tests 0, 1), "n <= 10^4" (tests 0, 2, 3; test 0 shared); public sample 2 -> 4.
"""

INPUTS = ["3\n", "50\n", "1000\n", "7000\n"]
DOUBLE = {
    "id": "double",
    "prompt": "Read n and print 2n.",
    "verifier_metadata": {
        "unit_tests": {"inputs": INPUTS, "outputs": [f"{2 * int(i)}\n" for i in INPUTS]},
        "subtasks": [
            {"name": "n < 100", "points": 40, "tests": [0, 1]},
            {"name": "n <= 10^4", "points": 60, "tests": [0, 2, 3]},
        ],
        "public_tests": {"inputs": ["2\n"], "outputs": ["4\n"]},
    },
}
