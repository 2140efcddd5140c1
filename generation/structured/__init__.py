"""Tool calls and structured output.

    tool_validation  request checks of ``tools`` / ``tool_choice`` / ``response_format`` (JSON
                     Schema validity, depth and satisfiability), before queueing
    tool_calls       ``ToolSynthesizer``: which tools are called, their argument tokens,
                     ``response_format`` answers
    schema_sampler   one bounded random instance of a JSON Schema
    regex_sampler    strings for a schema ``pattern`` from a non-backtracking generator
"""
