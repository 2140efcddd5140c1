"""Write the flags of a vLLM release's ``vllm serve`` parser, with their arity, to
``generation/config/vllm_serve_flags.json`` (committed: the simulator's parser and its tests read
it, and need neither vLLM's sources nor the network).

vLLM builds that parser in ``vllm/entrypoints/common/cli_args.py`` ``make_arg_parser``:
``--headless``, ``--api-server-count``, ``--config``, ``--grpc`` by hand, then
``FrontendArgs.add_cli_args`` (one flag per field of ``FrontendArgs`` and ``BaseFrontendArgs``)
and ``AsyncEngineArgs.add_cli_args`` (``vllm/engine/arg_utils.py``: ``EngineArgs.add_cli_args``,
one ``add_argument`` per flag, mostly ``**get_kwargs(SomeConfig)["field"]``).  ``get_kwargs``
turns a config dataclass field's type into argparse keywords (``_compute_kwargs``: a bool is
``BooleanOptionalAction``, a ``list[...]`` ``nargs="+"``, a ``Literal`` ``choices``, a dataclass
or dict JSON), and ``FlexibleArgumentParser`` (``vllm/utils/argparse_utils.py``) registers
``EnableDisableAction`` for ``BooleanOptionalAction``, which pairs ``--enable-x`` with
``--disable-x`` beside ``--no-x``.

Importing vLLM needs torch and a GPU build, so this script does not import it.  It runs vLLM's
own code for all of the above (``make_arg_parser``, the ``add_cli_args`` and
``_customize_cli_kwargs`` methods, ``get_kwargs`` / ``_compute_kwargs`` and their helpers,
``FlexibleArgumentParser``), compiled from the source tree, against stand-ins for the config
dataclasses: classes whose fields carry the annotations read from the source (type aliases,
``Literal``\\ s and imports followed through the tree; classes outside vLLM, torch's among them,
become opaque classes, as ``_compute_kwargs`` treats any non-builtin type).  A handful of runtime
objects are stubbed (:data:`_OVERRIDES`: the platform is CUDA, no plugins, no help text).  The
flags then come from the real ``argparse`` parser that code builds.

Each flag: ``arity`` (``flag``: no value, ``store_true``; ``bool``: ``--x`` / ``--no-x``
(``BooleanOptionalAction``); ``value``: one; ``optional``: zero or one (``nargs="?"``);
``list``: one or more (``nargs="+"``); ``append``: one, repeatable; an int: that many), ``type``
(``int``, ``float``, ``json``, ``str``: what a value must parse as), ``choices`` when argparse
checks them (``null``: the ``None`` an optional field accepts), ``aliases`` (short forms),
``negatives`` (the strings that turn a ``bool`` off), ``group`` (vLLM's argument group).

Usage::

    python bench/vllm_cli_flags.py /path/to/vllm-0.34.0 [--out generation/config/vllm_serve_flags.json]
"""
from __future__ import annotations

import argparse
import ast
import builtins
import dataclasses
import importlib
import json
import logging
import re
import sys
import types
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "generation" / "config" / "vllm_serve_flags.json"

# Modules whose real objects the compiled code and the annotations may use: the standard library's
# and these (anything else, torch and transformers among them, is an opaque class)
_REAL_MODULES = set(sys.stdlib_module_names) | {"typing_extensions", "regex", "yaml"}

# Runtime objects stubbed instead of compiled: (module, name) -> value
_OVERRIDES = {
    ("vllm.engine.arg_utils", "IS_ARGPARSE"): False,     # no help text needed
    ("vllm.engine.arg_utils", "NEEDS_HELP"): False,
    ("vllm.engine.arg_utils", "_maybe_add_docs_url"): lambda cls: "",
    ("vllm.engine.arg_utils", "load_general_plugins"): lambda: None,
    ("vllm.engine.arg_utils", "current_platform"): types.SimpleNamespace(
        device_type="cuda", pre_register_and_update=lambda parser=None: None),
}


_ARGPARSE_CLASSES = (argparse.Action, argparse.ArgumentParser, argparse._ArgumentGroup, argparse.HelpFormatter)


class _Opaque:
    """A value the compiled code touches but whose content does not shape the parser (a
    logger, a plugin manager): every attribute, call and item is another one."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Opaque()

    def __call__(self, *a, **k):
        return _Opaque()

    def __iter__(self):
        return iter(())


class _ConfigMeta(type):
    """The stand-ins' metaclass: a class attribute (``AsyncEngineArgs.enable_log_requests``,
    a field's default) is its literal default in the source, else None."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        for klass in cls.__mro__:
            node = klass.__dict__.get("_vllm_node")
            for stmt in node.body if node is not None else ():
                target = stmt.target if isinstance(stmt, ast.AnnAssign) else \
                    (stmt.targets[0] if isinstance(stmt, ast.Assign) else None)
                if isinstance(target, ast.Name) and target.id == name and stmt.value is not None:
                    try:
                        return ast.literal_eval(stmt.value)
                    except ValueError:
                        return None
        return None


class _ModuleProxy:
    """A vLLM module as ``import`` gives it to the compiled code: its names from the tree."""

    def __init__(self, tree, name):
        self._tree, self._name = tree, name

    def __getattr__(self, attr):
        if self._tree.path(f"{self._name}.{attr}"):
            return _ModuleProxy(self._tree, f"{self._name}.{attr}")
        return self._tree.ns(self._name)[attr]


class Tree:
    """vLLM's source tree (the folder holding ``vllm/``): modules parsed on demand, their
    top-level names resolved lazily into objects (:class:`ModuleNamespace`)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        if not (self.root / "vllm").is_dir():
            raise SystemExit(f"{root}: no vllm/ package here")
        self.namespaces: dict[str, ModuleNamespace] = {}
        self.stubs: dict[tuple[str, str], type] = {}      # (module, class) -> stand-in class
        self.pending_fields: dict[type, tuple[str, ast.ClassDef]] = {}
        # the compiled code's builtins: an ``import vllm...`` inside a function reads the tree
        self.builtins = {**vars(builtins), "__import__": self._import}

    def _import(self, name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and name.split(".")[0] == "vllm":
            return _ModuleProxy(self, name if fromlist else "vllm")
        return builtins.__import__(name, globals, locals, fromlist, level)

    def path(self, module: str) -> Path | None:
        base = self.root.joinpath(*module.split("."))
        for p in (base.with_suffix(".py"), base / "__init__.py"):
            if p.is_file():
                return p
        return None

    def ns(self, module: str) -> "ModuleNamespace":
        if module not in self.namespaces:
            self.namespaces[module] = ModuleNamespace(self, module)
        return self.namespaces[module]

    def module_value(self, module: str):
        """``import X`` / ``from X import Y`` of a module outside the tree's own code."""
        if module.split(".")[0] == "vllm":
            return self.ns(module) if self.path(module) else _Opaque()
        if module.split(".")[0] in _REAL_MODULES:
            return importlib.import_module(module)
        return None                                 # torch, transformers, ...: opaque classes

    # -- config dataclasses ----------------------------------------------------------------
    def fields(self, cls):
        """``dataclasses.fields`` of a stand-in, its fields read from the source on first use
        (lazily: configs refer to each other)."""
        pending = self.pending_fields.pop(cls, None)
        if pending is not None:
            module, node = pending
            ns = self.ns(module)
            out = {}
            for base in reversed(cls.__mro__[1:]):
                if base in self.stub_classes():
                    out.update({f.name: f for f in self.fields(base)})
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    ann = stmt.annotation
                    head = ann.value if isinstance(ann, ast.Subscript) else ann
                    if _name_of(head) in ("ClassVar", "InitVar") or _name_of(ann) in ("ClassVar", "InitVar"):
                        continue
                    f = dataclasses.field(default=None)
                    f.name, f.type, f._field_type = stmt.target.id, ns.type_of(ann), dataclasses._FIELD
                    out[f.name] = f
            cls.__dataclass_fields__ = out
        return dataclasses.fields(cls)

    def stub_classes(self):
        return set(self.stubs.values())


def _name_of(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _is_dataclass_def(node: ast.ClassDef) -> bool:
    for d in node.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if _name_of(target) in ("config", "dataclass"):
            return True
    return False


class ModuleNamespace(dict):
    """The globals of one vLLM module as the compiled code sees them: a top-level name is
    resolved on first use (an import followed through the tree, a constant, a type alias, a
    function compiled here, a class stand-in)."""

    def __init__(self, tree: Tree, module: str):
        super().__init__(__builtins__=tree.builtins, __name__=module)
        self.tree, self.module = tree, module
        path = tree.path(module)
        self.bindings: dict[str, tuple] = {}
        self.package = module if path and path.name == "__init__.py" else module.rpartition(".")[0]
        if path:
            self._scan(ast.parse(path.read_text(encoding="utf-8")).body)

    def _scan(self, body) -> None:
        for node in body:
            if isinstance(node, ast.If):
                if _name_of(node.test) == "TYPE_CHECKING":
                    self._scan(node.orelse)              # what runs: not the type checker's branch
                else:
                    self._scan(node.body)
            elif isinstance(node, ast.Try):
                self._scan(node.body)
            elif isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                if node.level:
                    base = self.package.split(".")
                    base = base[:len(base) - node.level + 1]
                    mod = ".".join(base + ([mod] if mod else []))
                for a in node.names:
                    self.bindings.setdefault(a.asname or a.name, ("from", mod, a.name))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.bindings[a.asname] = ("import", a.name)
                    else:
                        self.bindings[a.name.split(".")[0]] = ("import", a.name.split(".")[0])
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        self.bindings[t.id] = ("assign", node.value)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.bindings[node.name] = ("def", node)
            elif isinstance(node, ast.ClassDef):
                self.bindings[node.name] = ("class", node)

    def __missing__(self, name):
        if hasattr(builtins, name):
            return getattr(builtins, name)
        value = self.resolve(name)
        self[name] = value
        return value

    def resolve(self, name):
        if (self.module, name) in _OVERRIDES:
            return _OVERRIDES[(self.module, name)]
        b = self.bindings.get(name)
        if b is None:
            raise KeyError(name)                   # a NameError where it is used
        kind = b[0]
        if kind == "import":
            value = self.tree.module_value(b[1])
            return value if value is not None else _Opaque()
        if kind == "from":
            mod, attr = b[1], b[2]
            if mod.split(".")[0] == "vllm":
                if self.tree.path(f"{mod}.{attr}"):
                    return self.tree.ns(f"{mod}.{attr}")
                target = self.tree.ns(mod)
                return target[attr] if attr in target.bindings or (target.module, attr) in _OVERRIDES else _Opaque()
            real = self.tree.module_value(mod)
            if real is not None:
                return getattr(real, attr)
            return type(attr, (), {"__module__": mod})      # torch.dtype & co: an opaque class
        if kind == "assign":
            node = b[1]
            try:
                return ast.literal_eval(node)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                pass
            if isinstance(node, (ast.Subscript, ast.BinOp, ast.Name, ast.Attribute)):
                return self.type_of(node)
            try:
                return eval(compile(ast.Expression(node), f"<{self.module}>", "eval"), self)
            except Exception:                        # noqa: BLE001 (a runtime value nothing here needs)
                return _Opaque()
        if kind == "def":
            return self._compile(b[1], name)
        if kind == "class":
            return self._class(b[1])
        raise KeyError(name)

    def _compile(self, node, name):
        node = _strip_annotations(node)
        self._bind_names(node)
        code = compile(ast.fix_missing_locations(ast.Module([node], [])), f"<{self.module}>", "exec")
        local: dict = {}
        exec(code, self, local)                     # noqa: S102 (vLLM's own code, from the tree given)
        return local[name]

    def _bind_names(self, node) -> None:
        """Resolve the names a definition's own scope reads (a class body, default values,
        decorators): those lookups do not reach :meth:`__missing__`, only a function's do."""
        todo = [node]
        while todo:
            n = todo.pop()
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                todo += n.decorator_list + n.args.defaults + [d for d in n.args.kw_defaults if d]
                continue
            if isinstance(n, ast.Name) and n.id not in self and (n.id in self.bindings or
                                                                 (self.module, n.id) in _OVERRIDES):
                try:
                    self[n.id]
                except Exception:                    # noqa: BLE001 (left to fail where it is used)
                    pass
            todo += list(ast.iter_child_nodes(n))

    def _class(self, node: ast.ClassDef):
        """A class: a config dataclass becomes a stand-in whose fields are read from the source
        (with its methods: ``add_cli_args``, ``_customize_cli_kwargs``); an argparse action is
        compiled whole; anything else is an opaque class (or a ``dict`` subclass)."""
        key = (self.module, node.name)
        if key in self.tree.stubs:
            return self.tree.stubs[key]
        bases = []
        for b in node.bases:
            try:
                v = self.type_of(b)
            except Exception:                        # noqa: BLE001
                continue
            v = typing.get_origin(v) or v             # class X(dict[str, Y]): a dict subclass
            if isinstance(v, type):
                bases.append(v)
        if any(issubclass(b, _ARGPARSE_CLASSES) for b in bases):      # FlexibleArgumentParser, actions
            return self._compile(node, node.name)
        if _is_dataclass_def(node):
            methods = [_strip_annotations(s) for s in node.body if isinstance(s, ast.FunctionDef)
                       and all(_name_of(d) in ("staticmethod", "classmethod") for d in s.decorator_list)]
            for m in methods:
                self._bind_names(m)
            stub_bases = [b for b in bases if b in self.tree.stub_classes()]
            shell = ast.ClassDef(node.name, [ast.Name(f"_BASE_{i}", ast.Load()) for i in range(len(stub_bases))],
                                 [ast.keyword("metaclass", ast.Name("_META", ast.Load()))],
                                 methods or [ast.Pass()], [])
            local = {f"_BASE_{i}": b for i, b in enumerate(stub_bases)} | {"_META": _ConfigMeta}
            saved = {k: self.get(k, None) for k in local}
            self.update(local)
            try:
                exec(compile(ast.fix_missing_locations(ast.Module([shell], [])), f"<{self.module}>", "exec"), self)  # noqa: S102
                cls = dict.pop(self, node.name)
            finally:
                for k, v in saved.items():
                    if v is None:
                        dict.pop(self, k, None)
                    else:
                        self[k] = v
            cls.__module__ = self.module
            cls.__doc__ = ast.get_docstring(node)
            cls.__dataclass_fields__ = {}
            cls._vllm_node = node
            self.tree.stubs[key] = cls
            self.tree.pending_fields[cls] = (self.module, node)
            return cls
        is_dict = any(b is dict or (issubclass(b, dict) and b is not dict and not typing.is_typeddict(b))
                      for b in bases if isinstance(b, type)) and \
            not any(_name_of(b) == "TypedDict" for b in node.bases)
        cls = type(node.name, (dict,) if is_dict else (), {"__module__": self.module})
        self.tree.stubs[key] = cls
        return cls

    # -- annotations ----------------------------------------------------------------------
    def type_of(self, node):
        """An annotation's AST as the typing object Python would build at run time."""
        if isinstance(node, ast.Constant):
            if node.value is None:
                return None
            if node.value is Ellipsis:
                return Ellipsis
            if isinstance(node.value, str):           # a forward reference
                return self.type_of(ast.parse(node.value, mode="eval").body)
            return node.value
        if isinstance(node, ast.Name):
            if node.id in self.bindings or (self.module, node.id) in _OVERRIDES:
                return self[node.id]
            return getattr(builtins, node.id)
        if isinstance(node, ast.Attribute):
            base = self.type_of(node.value)
            if isinstance(base, ModuleNamespace):
                return base[node.attr]
            if isinstance(base, types.ModuleType):
                return getattr(base, node.attr)
            if isinstance(base, _Opaque):
                return type(node.attr, (), {"__module__": "opaque"})
            return getattr(base, node.attr)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return typing.Union[self.type_of(node.left), self.type_of(node.right)]
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.type_of(e) for e in node.elts]
        if isinstance(node, ast.Subscript):
            head = self.type_of(node.value)
            args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if head is typing.Literal:
                return typing.Literal[tuple(v for a in args for v in self._literal_values(a))]
            if head is typing.Annotated:
                return typing.Annotated[self.type_of(args[0]), "metadata"]
            if getattr(head, "__name__", "") == "SkipValidation":     # pydantic's: the inner type
                return self.type_of(args[0])
            params = [self.type_of(a) for a in args]
            if head is typing.Callable or head is __import__("collections.abc").abc.Callable:
                return head[params[0], params[1]] if len(params) == 2 else head
            if isinstance(head, type) and not hasattr(head, "__class_getitem__") and head.__module__ != "builtins":
                return head                             # a generic stand-in: its origin
            return head[tuple(params)] if len(params) > 1 else head[params[0]]
        if isinstance(node, ast.Call):
            return type("call", (), {"__module__": "opaque"})
        raise ValueError(f"{self.module}: cannot read annotation {ast.unparse(node)}")

    def _literal_values(self, node):
        if isinstance(node, ast.Starred):
            return tuple(self.type_of(node.value) if not isinstance(node.value, ast.Name)
                         else self[node.value.id])
        try:
            return (ast.literal_eval(node),)
        except ValueError:
            v = self.type_of(node)
            if typing.get_origin(v) is typing.Literal:
                return typing.get_args(v)
            return (v,)


def _strip_annotations(node):
    """A copy of a function (or class) without annotations: they are evaluated at definition
    time and name types nothing here needs."""
    node = ast.parse(ast.unparse(node)).body[0]
    for n in ast.walk(node):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n.returns = None
            for a in n.args.args + n.args.kwonlyargs + n.args.posonlyargs + \
                    [x for x in (n.args.vararg, n.args.kwarg) if x]:
                a.annotation = None
    return node


# ---------------------------------------------------------------------------------------------
def build_vllm_parser(root: Path) -> argparse.ArgumentParser:
    """vLLM's ``vllm serve`` parser, built by its own ``make_arg_parser`` (see the module doc)."""
    tree = Tree(root)
    logging.getLogger("vllm").setLevel(logging.ERROR)
    # make_arg_parser's module: vllm/entrypoints/common/cli_args.py from 0.34, openai/cli_args.py before
    cli = next((m for m in ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.openai.cli_args")
                if tree.path(m) and "make_arg_parser" in tree.ns(m).bindings), None)
    if cli is None:
        raise SystemExit(f"{root}: no make_arg_parser in vllm/entrypoints/{{common,openai}}/cli_args.py")
    utils = next(m for m in ("vllm.utils.argparse_utils", "vllm.utils") if tree.path(m)
                 and "FlexibleArgumentParser" in tree.ns(m).bindings)
    for module in ("vllm.engine.arg_utils", cli, utils):
        ns = tree.ns(module)
        ns["logger"] = logging.getLogger("vllm")
        ns["init_logger"] = logging.getLogger
    args_ns = tree.ns("vllm.engine.arg_utils")
    args_ns["fields"] = tree.fields                 # the stand-ins' fields, read on first use
    cli_ns = tree.ns(cli)
    cli_ns["ToolParserManager"] = types.SimpleNamespace(list_registered=lambda: [])
    parser_cls = tree.ns(utils)["FlexibleArgumentParser"]
    parser = parser_cls(prog="vllm serve", add_help=True)
    return cli_ns["make_arg_parser"](parser)


def _type_name(t) -> str:
    """What a value must parse as: ``int``, ``float``, ``json`` or ``str``."""
    seen = 0
    while t is not None and seen < 4:              # optional_type / parse_type: the wrapped type
        seen += 1
        name = getattr(t, "__name__", "")
        if t in (int, float, str):
            return t.__name__
        if name in ("human_readable_int", "human_readable_int_or_auto"):
            return "int"
        if name in ("loads", "parse_dataclass"):
            return "json"
        cells = [c.cell_contents for c in (getattr(t, "__closure__", None) or ())]
        inner = [c for c in cells if callable(c)]
        if name in ("_optional_type", "_parse_type") and inner:
            t = inner[0]
            continue
        if name == "parse_dataclass":
            return "json"
        return "str"
    return "str"


def flags_of(parser: argparse.ArgumentParser) -> list[dict]:
    """The parser's options, one entry per action (see the module doc for the keys)."""
    groups = {id(a): g.title for g in parser._action_groups for a in g._group_actions}
    strings: dict[int, list[str]] = {}
    for s, a in parser._option_string_actions.items():     # hidden strings (``--no-enable-x``) too
        strings.setdefault(id(a), []).append(s)
    out = []
    for a in parser._actions:
        if not a.option_strings or isinstance(a, argparse._HelpAction):
            continue
        every = strings.get(id(a), list(a.option_strings))
        if isinstance(a, argparse.BooleanOptionalAction):
            neg = set(getattr(a, "negative_option_strings", ())) | {s for s in every if s.startswith("--no-")}
            arity = "bool"
        else:
            neg = set()
            arity = {None: "value", "?": "optional", "+": "list", "*": "list", 0: "flag"}.get(a.nargs, a.nargs)
            if isinstance(a, argparse._AppendAction):
                arity = "append"
        positive = [s for s in every if s not in neg]
        long = [s for s in positive if s.startswith("--")]
        main = "--" + a.dest.replace("_", "-") if "--" + a.dest.replace("_", "-") in long else long[0]
        entry = {"flag": main, "arity": arity}
        if arity not in ("bool", "flag"):
            entry["type"] = _type_name(a.type)
        if a.choices is not None:
            entry["choices"] = [c if c is None or isinstance(c, (int, float, str)) else str(c) for c in a.choices]
        aliases = [s for s in positive if s != main]
        if aliases:
            entry["aliases"] = aliases
        if neg:
            entry["negatives"] = sorted(neg)
        entry["group"] = groups.get(id(a), "")
        out.append(entry)
    return sorted(out, key=lambda e: e["flag"])


def _version(root: Path) -> str:
    text = (root / "vllm" / "_version.py").read_text() if (root / "vllm" / "_version.py").is_file() else ""
    m = re.search(r"__version__ = version = '([^']+)'", text)
    return m.group(1) if m else "unknown"


def dump(version: str, flags: list[dict]) -> str:
    """One flag per line: a diff shows which flags a release added, removed or changed."""
    lines = [json.dumps(f, separators=(", ", ": ")) for f in flags]
    return ('{"vllm": %s,\n "source": %s,\n "flags": [\n  %s\n]}\n' % (
        json.dumps(version),
        json.dumps("vllm serve's parser: vllm/entrypoints/common/cli_args.py make_arg_parser "
                   "(FrontendArgs, AsyncEngineArgs.add_cli_args in vllm/engine/arg_utils.py); "
                   "written by bench/vllm_cli_flags.py"),
        ",\n  ".join(lines)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("vllm_src", type=Path, help="vLLM source tree (the folder holding vllm/), e.g. an "
                    "extracted sdist")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    flags = flags_of(build_vllm_parser(args.vllm_src))
    args.out.write_text(dump(_version(args.vllm_src), flags), encoding="utf-8")
    kinds: dict = {}
    for f in flags:
        kinds[str(f["arity"])] = kinds.get(str(f["arity"]), 0) + 1
    print(f"{len(flags)} flags of vLLM {_version(args.vllm_src)} -> {args.out}: "
          + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
