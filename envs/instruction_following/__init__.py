"""Instruction-following domain: IFEval, IF-RLVR (IFEvalG) and IFBench checkers in one registry."""
