"""Competitive-programming environment (``cascade/Code-v0``): Python and C++, binary reward."""
