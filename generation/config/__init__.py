"""Simulator configuration: every option declared once, and everything derived from that.

    options     ``OPTIONS`` (name, type, default, unit, help, group, env, bounds), the vLLM
                flags accepted and ignored, ``coerce``
    sim_config  ``SimConfig``: the options as attributes, validated together
    cli         ``load_config``: command line, ``--config`` YAML, environment; the README table
    values      value parsers shared with the admin API: durations, booleans, ``ConfigError``
"""
