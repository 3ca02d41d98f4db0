"""Symbols: what a guard's attribute is called in the rendered formulas, and what it means.

Each policy lists the symbols its guards read (``Policy.symbols``); the docs
render each guard by evaluating it on symbolic stand-ins and name every
attribute from that list. A guard that reads an attribute missing from it still
renders, under its Python name, marked undocumented (the docs tests fail until
it is added).
"""

from __future__ import annotations

from dataclasses import dataclass

CONFIG, VIEW, LOCAL, ARG = "config", "view", "local", "arg"


@dataclass(frozen=True)
class Symbol:
    scope: str  # CONFIG | VIEW | LOCAL | ARG (a guard parameter other than o, c, v, s)
    attr: str  # attribute (or parameter) name in the code
    shown: str  # name in rendered formulas
    meaning: str
    flag: bool = False  # a structural configuration switch (a plain bool even in the proofs)
