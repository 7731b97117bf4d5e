"""Long-context QA (``cascade/LongContextQA-v0``): documents, a question and a reference answer, graded by an LLM judge."""
