"""Multiple-choice QA (``cascade/MCQA-v0``), the NeMo Gym ``mcqa`` row layout and grading modes."""
