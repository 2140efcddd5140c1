"""Tool calls and structured output: the entry point ``app.py`` loads.

The work lives in three modules, one per job:

* :mod:`generation.tool_validation` - request checks of ``tools`` / ``tool_choice`` /
  ``response_format`` (JSON Schema validity, depth and satisfiability), before queueing;
* :mod:`generation.tool_calls` - :class:`ToolSynthesizer`: which tools are called, their
  argument tokens, ``response_format`` answers;
* :mod:`generation.schema_sampler` - one bounded random instance of a JSON Schema
  (:mod:`generation.regex_sampler` for ``pattern``).
"""
from __future__ import annotations

from .schema_sampler import WORDS, SchemaSampler, SchemaUnsatisfiable
from .tool_calls import ToolSynthesizer
from .tool_validation import ToolValidator, parse_tool_choice

__all__ = ["WORDS", "SchemaSampler", "SchemaUnsatisfiable", "ToolSynthesizer", "ToolValidator",
           "parse_tool_choice"]
