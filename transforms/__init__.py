"""Packing and per-document transforms, installed as ``jaxdata.transforms``.

This directory sits at the repository root and is mapped onto the
``jaxdata.transforms`` package by ``pyproject.toml``; no top-level
``transforms`` module is installed. The packers arrive with the packing issue.
"""

__all__: list[str] = []
