"""Declarative line grammars: the TOML files under ``grammars/``, loaded and validated."""

from nccl_logsift.grammar.registry import load_grammars
from nccl_logsift.grammar.schema import FieldKind, Grammar, Layer, Pattern, Sample

__all__ = ["FieldKind", "Grammar", "Layer", "Pattern", "Sample", "load_grammars"]
