"""The command line, the ``--config`` YAML file and the environment, read into a
:class:`~generation.config.sim_config.SimConfig` (:func:`load_config`), and the README's flags
table (:func:`options_table`).
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import time
from typing import Any

from .values import BOOL_LITERALS, ConfigError, format_duration
from .options import GROUPS, IGNORED_FLAGS, OPTIONS, Option, coerce, human_readable_int
from .vllm_flags import VLLM_FLAGS, VLLM_FLAGS_RELEASE, _OLDER_ALIASES, _OPTION_ALIASES
from .kv_events import apply_kv_events_config
from .sim_config import LATENCY_ONLY, SimConfig
from .vllm_versions import apply_version_defaults, newer_flags


# ---------------------------------------------------------------------------------------------
class _OneLineParser(argparse.ArgumentParser):
    def error(self, message):  # one clear line, non-zero exit
        raise ConfigError(_did_you_mean(message))


def _did_you_mean(message: str) -> str:
    """argparse's ``unrecognized arguments: --max-num-seq 3`` with the closest known flag of each
    unknown one (``--max-num-seq (did you mean --max-num-seqs?)``), from difflib."""
    head = "unrecognized arguments: "
    if not message.startswith(head):
        return message
    import difflib
    known = sorted(f for f in _flag_kinds()[2] if f.startswith("--") and not f.startswith("--no-"))
    out = []
    for tok in message[len(head):].split(" "):
        name = tok.split("=", 1)[0]
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.75) if name.startswith("--") else []
        out.append(f"{tok} (did you mean {close[0]}?)" if close else tok)
    return head + " ".join(out)


class _HelpFormatter(argparse.HelpFormatter):
    """Boolean switches shown as they are used, without a value (``--omni``, not ``--omni BOOL``);
    ``--omni=false`` and ``--no-omni`` still turn them off."""

    def _format_action_invocation(self, action):
        if action.metavar == "BOOL" and action.option_strings:
            return ", ".join(action.option_strings)
        return super()._format_action_invocation(action)


def _default_text(o: Option) -> str:
    """The default as the help text and the README show it."""
    if o.name == "seed":
        return "current time"
    if o.default == "" and o.choices and "" in o.choices:
        return "empty"                      # an allowed value of its own (--latency-calculator: the legacy rule)
    if o.secret or o.default in ("", [], None):
        return "none"
    if o.type == "duration":
        return format_duration(o.default)
    if o.type == "bool":
        return "true" if o.default else "false"
    return str(o.default)


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The command line: ``[serve] [MODEL] [--flag value ...]``, generated from OPTIONS, then
    every other ``vllm serve`` flag (VLLM_FLAGS, IGNORED_FLAGS) with vLLM's arity, hidden from
    ``--help``: vLLM's other spellings of the options (``--device-memory-utilization``,
    ``--disable-prefix-caching``) set them, the rest are accepted and ignored."""
    p = _OneLineParser(prog=prog, usage="%(prog)s [serve] [MODEL] [--flag VALUE ...]", description="vLLM simulator: serves vLLM's OpenAI-compatible API with "
                       "simulated generation. Boolean switches take no value (--flag); --flag=false or "
                       "--no-flag turns one off.", argument_default=argparse.SUPPRESS, allow_abbrev=False,
                       formatter_class=_HelpFormatter)
    p.add_argument("model_tag", nargs="?", metavar="MODEL", help="Model name (as `vllm serve MODEL`); "
                   "overrides --model")
    p.add_argument("--config", help="YAML file whose keys are the flag names")
    for group, title in GROUPS.items():
        opts = [o for o in OPTIONS.values() if o.group == group and o.cli]
        if not opts:
            continue
        g = p.add_argument_group(title)
        for o in opts:
            text = o.help
            if o.choices:
                text += " (choices: " + ", ".join(repr(c) if c == "" else str(c) for c in o.choices) + ")"
            if o.env:
                text += f" [env {o.env}]"
            if o.name in LATENCY_ONLY:
                text += " [no effect in step mode]"
            if o.admin:
                text += " [admin]"
            unit = f" {o.unit}" if o.unit and o.type != "duration" else ""
            text += f" (default: {_default_text(o)}{unit})"
            names = _flag_names(o)
            if o.type in ("list", "lora", "ints"):
                g.add_argument(*names, dest=o.name, nargs="*", help=text.replace("%", "%%"))
            else:
                g.add_argument(*names, dest=o.name, metavar="BOOL" if o.type == "bool" else o.type.upper(),
                               help=text.replace("%", "%%"))
                if o.type == "bool":
                    g.add_argument(f"--no-{o.name}", action="store_const", const="false", dest=o.name,
                                   help=argparse.SUPPRESS)
    taken = set(p._option_string_actions)
    for o in OPTIONS.values():              # vLLM's other spellings of the options, hidden
        entry = _vllm_entry(o)
        if o.cli and entry is not None:
            kind = "bool" if o.type == "bool" else ("list" if o.type in ("list", "lora", "ints") else "value")
            _add_vllm_flag(p, taken, entry.get("aliases", ()), o.name, kind, None,
                           entry.get("negatives", ()) if o.type == "bool" else ())
    g = p.add_argument_group("vLLM flags accepted and ignored", "Listed in one start-up log line.")
    for name, arity in IGNORED_FLAGS.items():
        entry = VLLM_FLAGS.get(name, {})
        names = [f"--{name}", *entry.get("aliases", ()), *(a for a, n in _OLDER_ALIASES.items() if n == name)]
        negatives = entry.get("negatives", (f"--no-{name}",) if arity == "bool" else ())
        _add_vllm_flag(g, taken, names, "ignored:" + name, arity, entry.get("choices"), negatives)
    return p


def _vllm_entry(o: Option) -> dict | None:
    """An option's VLLM_FLAGS entry: its name's, or an alias's (``--cudagraph-capture-sizes``)."""
    for name in (o.name, *(a[2:] for a in o.aliases if a.startswith("--"))):
        if name in VLLM_FLAGS:
            return VLLM_FLAGS[name]
    return None


def _add_vllm_flag(g, taken: set, names, dest: str, arity, choices, negatives) -> None:
    """Register hidden flags with vLLM's arity (VLLM_FLAGS' ``arity``): a switch's value is
    added by :func:`_normalise`, its negatives (``--no-x``, ``--disable-x``) store ``false``;
    ``choices`` are checked as vLLM's argparse checks them (a null one: ``None`` or an empty
    value, which its ``optional_type`` reads as None).  Strings already ``taken`` stay with their
    owner (``--disable-log-requests`` is an option here, vLLM's negative of
    ``--enable-log-requests`` there)."""
    names = [n for n in names if n not in taken]
    if names:
        kw: dict[str, Any] = {"dest": dest, "help": argparse.SUPPRESS}
        if arity in ("bool", "flag"):
            kw["metavar"] = "BOOL"
        else:
            kw["metavar"] = "X"
            if choices is not None:
                kw["choices"] = [str(c) for c in choices if c is not None] + (["None", ""] if None in choices else [])
            if arity == "list":
                kw["nargs"] = "+"
            elif arity == "optional":
                kw.update(nargs="?", const="true")
            elif arity == "append":
                kw["action"] = "append"
            elif isinstance(arity, int):
                kw["nargs"] = arity
        g.add_argument(*names, **kw)
        taken.update(names)
    negatives = [n for n in negatives if n not in taken]
    if negatives:
        g.add_argument(*negatives, action="store_const", const="false", dest=dest, help=argparse.SUPPRESS)
        taken.update(negatives)


def _flag_names(o: Option) -> list[str]:
    return [f"--{o.name}", *o.aliases] + [a for a, n in _OPTION_ALIASES.items() if n == o.name]


@functools.lru_cache(maxsize=1)
def _parser() -> argparse.ArgumentParser:
    """The parser :func:`load_config` uses, built once (some 600 flag strings)."""
    return build_parser()


@functools.lru_cache(maxsize=1)
def _flag_kinds() -> tuple[frozenset, frozenset, frozenset]:
    """``(switches, value flags, every flag string)`` of the parser, for :func:`_normalise`: a
    switch takes a boolean literal or nothing, a value flag exactly one value."""
    switches, values = set(), set()
    for s, a in _parser()._option_string_actions.items():
        if a.metavar == "BOOL":
            switches.add(s)
        elif type(a) in (argparse._StoreAction, argparse._AppendAction) and a.nargs is None:
            values.add(s)
    return frozenset(switches), frozenset(values), frozenset(_parser()._option_string_actions)


def _normalise(argv: list[str]) -> list[str]:
    """Joins flags and values where argparse would guess wrong:

    * a boolean switch takes the next token only when it is a boolean literal (``--flag false``),
      so ``--enforce-eager MODEL`` keeps MODEL positional;
    * a value that starts with ``-`` (``--time-to-first-token -1s``) stays the flag's value, so
      that validation can name the flag instead of argparse saying "expected one argument"."""
    switches, values, every = _flag_kinds()
    out, i = [], 0
    while i < len(argv):
        tok = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if tok == "--":
            out.extend(argv[i:])
            break
        if tok in switches:
            if nxt in BOOL_LITERALS:
                out.append(f"{tok}={nxt}")
                i += 2
                continue
            out.append(f"{tok}=true")
        elif tok in values and nxt is not None and nxt.startswith("-") and nxt not in every:
            out.append(f"{tok}={nxt}")
            i += 2
            continue
        else:
            out.append(tok)
        i += 1
    return out


_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)")


def _dialects(argv: list[str]) -> tuple[list[str], list[str], list[str]]:
    """The flag dialects other vLLM front ends and the reference's releases accept, rewritten to
    this parser's: returns ``(argv, lora names, deprecation notes)``.

    * ``--max_num_seqs`` is ``--max-num-seqs`` (vLLM's parser reads underscores in any flag name,
      up to a ``.``);
    * vLLM 0.34's ``-O3``, ``-O=3``, ``-Odecode`` and ``-O 3`` (0 to 3) are
      ``--optimization-level``; ``-O`` with any other value is the ``--compilation-config`` of
      older releases (vLLM's ``FlexibleArgumentParser.parse_args``);
    * a JSON flag given key by key, ``--kv-transfer-config.kv_connector X``,
      ``-cc.pass_config.fuse_norm_quant=true``, ``--json-arg.list+ a,b``, is that flag with the
      JSON object, as vLLM assembles it (:func:`_dotted_args`);
    * ``--lora NAME[,NAME...]`` (the reference's removed flag, one value per flag, repeatable; the
      inference-extension manifests still pass it) becomes LoRA modules without a path, with a
      deprecation note."""
    known = _flag_kinds()[2]
    out, names, notes, i = [], [], [], 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            out.extend(argv[i:])
            break
        if tok.startswith("--") and "_" in tok.split("=", 1)[0].split(".", 1)[0]:
            name, sep, value = tok.partition("=")
            head, dot, keys = name.partition(".")
            dashed = head.replace("_", "-")
            if dashed in known or dashed == "--lora":
                tok = dashed + dot + keys + sep + value
        if tok.startswith("-O") and tok != "-O" and not tok.startswith("-O."):
            out += ["--optimization-level", tok[3:] if tok[2] == "=" else tok[2:]]
            i += 1
            continue
        if tok == "-O" and i + 1 < len(argv) and argv[i + 1] in ("0", "1", "2", "3"):
            tok = "--optimization-level"
        name, sep, value = tok.partition("=")
        if name == "--lora":
            given = [value] if sep else []       # one value a flag, as the reference's string slice
            if not sep and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                i += 1
                given.append(argv[i])
            names += [n.strip() for v in given for n in v.split(",") if n.strip()]
            if "--lora" not in " ".join(notes):
                notes.append("--lora (removed from the reference simulator) is read as --lora-modules "
                             "'{\"name\": NAME}'")
            i += 1
            continue
        out.append(tok)
        i += 1
    return _dotted_args(out, known), names, notes


def _dotted_args(argv: list[str], known) -> list[str]:
    """``--flag.key.sub VALUE`` (or ``=VALUE``) of a known flag, gathered per flag into one JSON
    object passed last, as vLLM's ``FlexibleArgumentParser.parse_args`` does: a value is JSON,
    else a ``human_readable_int`` (``80g``), else a string; ``key+ a,b`` appends a list; objects
    merge, lists concatenate."""
    gathered: dict[str, dict] = {}
    out, i = [], 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            out.extend(argv[i:])
            break
        name, sep, value = tok.partition("=")
        flag, dot, path = name.partition(".")
        if not (dot and path and flag in known and flag.startswith("-")):
            out.append(tok)
            i += 1
            continue
        if not sep:
            value = argv[i + 1] if i + 1 < len(argv) else ""
            i += 1
        i += 1
        if path.endswith("+"):
            path, obj = path[:-1], value.split(",")
        else:
            try:
                obj = json.loads(value)
            except json.JSONDecodeError:
                try:
                    obj = human_readable_int(value)
                except (ValueError, IndexError):
                    obj = value
        for key in reversed(path.split(".")):
            obj = {key: obj}
        _merge(gathered.setdefault(flag, {}), obj)
    for flag, obj in gathered.items():
        out += [flag, json.dumps(obj)]
    return out


def _merge(into: dict, update: dict) -> None:
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        elif isinstance(v, list) and isinstance(into.get(k), list):
            into[k] += v
        else:
            into[k] = v


def _duration_notes(ns: dict) -> list[str]:
    """Deprecation notes of duration flags given as bare numbers (``--time-to-first-token=150``:
    milliseconds, as the reference's releases read them; the workload-variant autoscaler still
    passes them)."""
    return [f"--{key}={val}: a bare number is read as milliseconds (the reference's old form); write {val}ms"
            for key, val in ns.items() if key in OPTIONS and OPTIONS[key].type == "duration"
            and isinstance(val, str) and _NUMBER.fullmatch(val.strip()) and float(val) != 0]


def _yaml_key(key) -> tuple:
    """A YAML key as ``(flag name, negated)``: vLLM's config files may spell keys with
    underscores, and a key may be any spelling the command line takes (``uvicorn_log_level``,
    ``cudagraph_capture_sizes``; ``disable_prefix_caching: true``, the negative of
    ``enable-prefix-caching``, is that switch turned off)."""
    if not isinstance(key, str):
        return key, False
    dashed = key.replace("_", "-")
    if dashed in OPTIONS or dashed in IGNORED_FLAGS:
        return dashed, False
    action = _parser()._option_string_actions.get("--" + dashed)
    if action is not None:
        dest = action.dest.removeprefix("ignored:")
        if dest in OPTIONS or dest in IGNORED_FLAGS:
            return dest, action.const == "false"
    return key, False


def _read_yaml(path: str) -> dict:
    import yaml          # only --config needs it (about 30 ms of start-up otherwise)
    try:
        with open(path, encoding="utf-8") as fh:
            doc = yaml.safe_load(fh) or {}
    except OSError as e:
        raise ConfigError(f"failed to read configuration file: {e}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"failed to read configuration file: {path} is not UTF-8 text") from None
    except RecursionError:
        raise ConfigError("failed to unmarshal configuration: nested too deeply") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"failed to unmarshal configuration: {e}".replace("\n", " ")) from None
    if not isinstance(doc, dict):
        raise ConfigError("failed to unmarshal configuration: top level must be a mapping")
    return doc


def load_config(argv: list[str] | None = None, env: dict | None = None) -> SimConfig:
    """Build and validate the configuration from argv, the environment and an optional YAML file.

    ``argv`` may start with ``serve`` (``vllm serve`` style) and carry the model positionally.
    Raises ConfigError with one line naming the flag or rule that failed."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:
        argv = argv[1:]
    env = dict(os.environ if env is None else env)
    argv, lora_names, deprecations = _dialects(argv)
    ns = vars(_parser().parse_args(_normalise(argv)))
    deprecations += _duration_notes(ns)
    ignored = [k.split(":", 1)[1] for k in ns if k.startswith("ignored:")]
    ns = {k: v for k, v in ns.items() if not k.startswith("ignored:")}
    if ns.get("model_tag") is not None:
        ns["model"] = ns.pop("model_tag")
    ns.pop("model_tag", None)
    values: dict[str, Any] = {}
    path = ns.pop("config", None)
    if path:
        for key, val in _read_yaml(path).items():
            key, negated = _yaml_key(key)
            o = OPTIONS.get(key)
            if o is not None and o.cli:
                values[key] = coerce(key, val)
                if negated and o.type == "bool" and values[key] is not None:
                    values[key] = not values[key]
            elif key in IGNORED_FLAGS:
                ignored.append(key)
            else:
                raise ConfigError(f"failed to unmarshal configuration: unknown field \"{key}\"")
    for o in OPTIONS.values():
        if o.env and o.name not in ns:
            raw = env.get(o.env)
            if o.cli and raw:                   # an empty variable does not override
                values[o.name] = coerce(o.name, raw)
            elif not o.cli:
                values[o.name] = (raw == "1") if o.type == "bool" else coerce(o.name, raw or "")
    for key, val in ns.items():
        values[key] = coerce(key, val)
    if values.get("max-model-len") == -1:       # vLLM's `auto`: the model's context length, as when not given
        del values["max-model-len"]
    if lora_names:
        values["lora-modules"] = [*values.get("lora-modules", []), *coerce("lora-modules", [
            json.dumps({"name": n}) for n in lora_names])]
    cfg = SimConfig()
    for key, val in values.items():
        setattr(cfg, OPTIONS[key].attr, val)
    cfg.ignored_flags = list(dict.fromkeys(ignored))
    cfg.deprecations = deprecations                  # old dialects read (one start-up log line)
    cfg.explicit = frozenset(values)                 # options given (CLI, YAML, env), not defaulted
    # the VLLM_* variables set, those whose name holds KEY left out (dev mode's /server_info "vllm_env")
    cfg.vllm_env = {k: v for k, v in sorted(env.items()) if k.startswith("VLLM_") and "KEY" not in k}
    apply_kv_events_config(cfg, cfg.explicit)
    if cfg.seed is None:
        cfg.seed = time.time_ns()
    newer = newer_flags(cfg)
    if newer:       # absent from --vllm-version's parser: refused as its argparse refuses them, before any check
        from .vllm_versions import FLAGS_FROM
        since = "; ".join(f"--{n} is new in vLLM {'.'.join(map(str, FLAGS_FROM[n]))}" for n in newer)
        raise ConfigError("unrecognized arguments: " + " ".join(_as_given(argv, n, getattr(cfg, OPTIONS[n].attr))
                                                                 for n in newer)
                          + f" (--vllm-version {cfg.vllm_version}'s parser: {since})", newer[0])
    _multi_port(cfg)
    _local_ranks(cfg)
    cfg.validate()
    _rank_ports(cfg)
    apply_version_defaults(cfg, step=cfg.latency_calculator == "step")
    return cfg


def _multi_port(cfg) -> None:
    """``--data-parallel-multi-port-external-lb``: vLLM 0.34's checks, in its order and words
    (``entrypoints/cli/serve.py``'s one load-balancing mode, then ``launchers/dp_supervisor.py``'s
    ``validate_multi_port_external_lb_args``).  Raises ConfigError."""
    if not cfg.data_parallel_multi_port_external_lb:
        return
    flag = "data-parallel-multi-port-external-lb"
    if cfg.data_parallel_external_lb or cfg.data_parallel_rank >= 0 or "data-parallel-hybrid-lb" in cfg.ignored_flags:
        raise ConfigError("Cannot use more than one data parallel load balancing mode. Choose one of: "
                          "--data-parallel-multi-port-external-lb, --data-parallel-external-lb (or "
                          "--data-parallel-rank), --data-parallel-hybrid-lb (or --data-parallel-start-rank).", flag)
    if cfg.grpc:
        raise ConfigError("--data-parallel-multi-port-external-lb does not support --grpc", flag)
    size, local = cfg.data_parallel_size, cfg.data_parallel_size_local
    if size < 2:
        raise ConfigError("--data-parallel-multi-port-external-lb requires --data-parallel-size > 1", flag)
    if local is None or local < 2:
        raise ConfigError("--data-parallel-multi-port-external-lb requires --data-parallel-size-local >= 2", flag)
    if local > size:
        raise ConfigError("--data-parallel-size-local cannot exceed --data-parallel-size", "data-parallel-size-local")
    if size % local:
        raise ConfigError("--data-parallel-size must be divisible by --data-parallel-size-local",
                          "data-parallel-size-local")
    if (cfg.data_parallel_start_rank or 0) + local > size:
        raise ConfigError("multi-port supervised ranks would exceed --data-parallel-size", "data-parallel-start-rank")
    port = cfg.data_parallel_supervisor_port
    if not 0 <= port <= 65535:          # else bind() raises OverflowError: a traceback, exit 1
        raise ConfigError(f"invalid data parallel supervisor port '{port}'", "data-parallel-supervisor-port")
    if cfg.port <= port <= cfg.port + local - 1:
        raise ConfigError(f"--data-parallel-supervisor-port {port} overlaps with child rank ports "
                          f"{cfg.port}-{cfg.port + local - 1}", "data-parallel-supervisor-port")
    grpc = cfg.grpc_port
    if grpc and grpc <= port <= grpc + local - 1:         # the simulator's own --grpc-port: rank r on + r
        raise ConfigError(f"--data-parallel-supervisor-port {port} overlaps with the ranks' gRPC ports "
                          f"{grpc}-{grpc + local - 1}", "data-parallel-supervisor-port")
    cfg.data_parallel_external_lb = True        # the ranks' own layout: one port and process each


def _rank_ports(cfg) -> None:
    """One process per rank (``--data-parallel-external-lb``, the launching rank): rank ``r``
    listens on ``--port + r`` and serves gRPC on ``--grpc-port + r``, so the last local rank's
    ports must exist too (grpcio binds an ephemeral port for 65536 and only warns).  Raises
    ConfigError."""
    if cfg.data_parallel_size < 2 or not cfg.data_parallel_external_lb or cfg.data_parallel_rank > 0:
        return
    last = cfg.data_parallel_size - 1
    if cfg.port + last > 65535:
        raise ConfigError(f"invalid port '{cfg.port}': rank {last} would listen on {cfg.port + last}", "port")
    if cfg.grpc_port and cfg.grpc_port + last > 65535:
        raise ConfigError(f"invalid gRPC port '{cfg.grpc_port}': rank {last} would serve gRPC on "
                          f"{cfg.grpc_port + last}", "grpc-port")


def _local_ranks(cfg) -> None:
    """``--data-parallel-size-local L`` (vLLM's, a multi-node data-parallel deployment: this
    node runs L of the ``--data-parallel-size N`` ranks): this process serves L ranks
    (``data_parallel_size`` becomes L) and ``data_parallel_size_total`` keeps N, the data-parallel
    size a MoE model's experts are shared over.  Raises ConfigError (vLLM's message for L > N)."""
    local = cfg.data_parallel_size_local
    if local is None:
        return
    if not 1 <= local <= 8:
        raise ConfigError("data parallel size local must be between 1 and 8", "data-parallel-size-local")
    if local > cfg.data_parallel_size:
        raise ConfigError(f"data_parallel_size_local ({local}) must be <= data_parallel_size "
                          f"({cfg.data_parallel_size})", "data-parallel-size-local")
    start = cfg.data_parallel_start_rank
    if start is not None and not 0 <= start <= cfg.data_parallel_size - local:
        raise ConfigError(f"data parallel start rank {start} leaves no room for {local} local ranks of "
                          f"{cfg.data_parallel_size}", "data-parallel-start-rank")
    cfg.data_parallel_size_total, cfg.data_parallel_size = cfg.data_parallel_size, local


def _as_given(argv: list[str], name: str, value) -> str:
    """Flag ``name``'s words as ``argv`` gave them (``--x 15`` or ``--x=15``; the last, as
    argparse keeps), or ``--x VALUE`` when it came from the YAML file (vLLM turns the file's keys
    into such arguments)."""
    flag, words = f"--{name}", f"--{name} {value}"
    for i, tok in enumerate(argv):
        if tok == flag and i + 1 < len(argv):
            words = f"{tok} {argv[i + 1]}"
        elif tok.startswith(flag + "="):
            words = tok
    return words


# ---------------------------------------------------------------------------------------------
# Why an ignored flag changes nothing here, where that is not plain (the README's list says it)
IGNORED_NOTES: dict[str, str] = {
    "enable-scale-out": "the render, derender and `/inference/v1/*` routes it registers are always served",
    "optimization-level": "also `-O3`, `-O=3`, `-O 3`",
    "enable-log-requests": "its negative `--disable-log-requests` is the simulator's access-log switch",
    # /metrics families they add, as vLLM's (README "Metrics")
    "tool-call-parser": "adds `vllm:tool_call_parser_invocations`",
    "enable-auto-tool-choice": "non-streaming answers count in `vllm:tool_call_parser_invocations`",
    "enable-lora": "adds `vllm:lora_requests_info`",
    "weight-transfer-config": "dev mode's RL weight routes take weight transfer as configured (no weights move)",
    "show-hidden-metrics-for-version": "with `--vllm-version` 0.12 to 0.14, shows `vllm:time_per_output_token_seconds`",
}


def options_table() -> str:
    """Markdown table of the flags for the README, one section per group (generated: the README
    holds exactly this text between its ``flags-table`` markers)."""
    out = []
    for group, title in GROUPS.items():
        opts = [o for o in OPTIONS.values() if o.group == group]
        if not opts:
            continue
        out += [f"**{title}**", "", "| flag | type | default | meaning |", "|---|---|---|---|"]
        for o in opts:
            flag = f"`--{o.name}`" if o.cli else f"env `{o.env}`"
            if o.aliases:
                flag += " (" + ", ".join(f"`{a}`" for a in o.aliases) + ")"
            kind = o.type + (f" ({o.unit})" if o.unit and o.type != "duration" else "")   # (a duration: 150ms, 2s)
            text = o.help.replace("|", "\\|")
            if o.choices:
                text += ": " + ", ".join(f"`{c}`" if c != "" else "empty" for c in o.choices)
            if o.maximum is not None:
                text += f"; at most {format_duration(o.maximum) if o.type == 'duration' else f'{o.maximum:g}'}"
            if o.name in LATENCY_ONLY:
                text += "; no effect in step mode (`--latency-calculator step`: the engine steps time every token)" if o.name == LATENCY_ONLY[0] else "; no effect in step mode"
            notes = [f"env `{o.env}`" for _ in [0] if o.env and o.cli] + (["admin"] if o.admin else [])
            if notes:
                text += " (" + ", ".join(notes) + ")"
            out.append(f"| {flag} | {kind} | `{_default_text(o)}` | {text} |")
        out.append("")
    out.append(f"**Accepted and ignored** (one start-up log line lists those given; another those whose note "
               f"names a metric they add, `--enable-auto-tool-choice`, `--tool-call-parser` and `--enable-lora`): "
               f"every other flag of "
               f"`vllm serve` {VLLM_FLAGS_RELEASE}, with vLLM's arity (a switch's `--no-` form and, for "
               f"`--enable-x` / `--disable-x`, its opposite; several values where vLLM takes a list; `choices` "
               f"checked as vLLM checks them), then flags of older releases that {VLLM_FLAGS_RELEASE} removed. "
               f"By vLLM's argument group:")
    out.append("")
    groups: dict[str, list[str]] = {}
    for name in IGNORED_FLAGS:
        entry = VLLM_FLAGS.get(name)
        group = (entry["group"] if entry["group"] != "options" else "serve") if entry else "older releases"
        short = [*(entry or {}).get("aliases", ()), *(a for a, n in _OLDER_ALIASES.items() if n == name)]
        extra = "; ".join(filter(None, [", ".join(f"`{a}`" for a in short), IGNORED_NOTES.get(name, "")]))
        groups.setdefault(group, []).append(f"`--{name}`" + (f" ({extra})" if extra else ""))
    order = sorted(groups, key=lambda g: (g != "serve", g == "older releases", g))
    for group in order:
        out.append(f"- {group}: " + ", ".join(groups[group]))
    return "\n".join(out)
