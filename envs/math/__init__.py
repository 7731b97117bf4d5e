"""Math with symbolic answer checking (``cascade/Math-v0``) via math-verify in a worker-process pool."""
