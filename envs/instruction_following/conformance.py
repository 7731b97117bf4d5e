"""``cascade/InstructionFollowing-v0``'s conformance case (``cascade_envs.testing.check_env``)."""

from cascade_envs.testing import Case

ROW = {
    "id": "c",
    "prompt": "Describe a night. Use the word lantern.",
    "instruction_id_list": ["keywords:existence"],
    "kwargs": [{"keywords": ["lantern"]}],
}

CASE = Case(
    good_row=ROW,
    good_answer="<think>Mention it.</think>A lantern glowed all night.",
    bad_answer="It was dark all night.",
    bad_rows=[
        ({"prompt": "x", "instruction_id_list": "keywords:existence"}, "instruction_id_list"),
        ({"prompt": "x", "instruction_id_list": ["keywords:existence"], "kwargs": [{}, {}]}, "kwargs"),
    ],
)
