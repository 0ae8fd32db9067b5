"""The shape of the code: every import runs down the layers of docs/ARCHITECTURE.md, nothing
in the product imports the lab, no import hides inside a function, every package says what it
owns, and the engine emulator's shipped parts hold its whole import closure."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Bottom to top. A module may import its own layer and the layers below it. The vocabulary
# (layer 1) is what every package shares: config, the plan's types, on-host paths, release
# numbers and fact tables, unit text, the measurement core and the prompt set.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("errors", ("specdec.errors",)),
    ("vocabulary", ("specdec.config", "specdec.plan.types", "specdec.host.layout",
                    "specdec.engines.version", "specdec.engines.ranges",
                    "specdec.engines.support", "specdec.engines.vllm.facts",
                    "specdec.engines.trtllm.facts", "specdec.engines.dynamo.facts",
                    "specdec.render.unitfile", "specdec.render.sandbox",
                    "specdec.render.devicenodes", "specdec.bench.onhost",
                    "specdec.bench.prompts", "specdec.watch.reader")),
    ("catalog", ("specdec.catalog",)),
    ("host", ("specdec.host",)),
    ("engines", ("specdec.engines",)),
    ("gate", ("specdec.gate",)),
    ("bench", ("specdec.bench",)),
    ("plan", ("specdec.plan",)),
    ("render", ("specdec.render",)),
    ("tune", ("specdec.tune",)),
    ("verify", ("specdec.verify",)),
    ("report", ("specdec.report",)),
    ("watch", ("specdec.watch",)),
    ("fleet", ("specdec.fleet",)),
    ("roles", ("specdec.roles", "specdec.deploys")),
    ("cli", ("specdec.cli", "specdec.__main__")),
    ("data", ("specdec.templates",)),  # the Jinja templates: imports nothing, imported by none
]
def product_modules() -> dict[str, Path]:
    """Every product module by dotted name (the pyinfra layer through specdec/'s links to the
    top-level roles/, deploys/ and templates/, under its installed name)."""
    out = {}
    for top, _, names in os.walk(ROOT / "specdec", followlinks=True):
        for p in (Path(top) / n for n in names if n.endswith(".py")):
            out[".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")] = p
    assert "specdec.roles.serve" in out and "specdec.deploys.specdec" in out
    return out


def layer_of(module: str) -> int:
    best, layer = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, layer = len(p), i
    return layer


def imports(path: Path, module: str) -> list[tuple[int, str, bool]]:
    """(line, imported module, inside a function) for every import of ``path``."""
    tree = ast.parse(path.read_text())
    pkg = module if path.name == "__init__.py" else module.rpartition(".")[0]
    nested = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
              for n in ast.walk(f)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            out.append((node.lineno, name, id(node) in nested))
    return out


def resolve(name: str, known: dict[str, Path]) -> str | None:
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


MODULES = product_modules()


def test_every_product_module_has_a_layer() -> None:
    assert [m for m in MODULES if layer_of(m) < 0 and m != "specdec"] == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_run_down_the_layers(module: str) -> None:
    mine = layer_of(module)
    up = []
    for line, name, _ in imports(MODULES[module], module):
        target = resolve(name, MODULES)
        if target in (None, "specdec", module) or target.startswith(module + "."):
            continue
        if target.count(".") == 1 and (MODULES[target].name == "__init__.py"):
            continue  # a package's __init__ (its docstring only)
        if layer_of(target) > mine:
            up.append(f"{module}:{line} -> {target} ({LAYERS[layer_of(target)][0]} is above "
                      f"{LAYERS[mine][0]})")
    assert up == []


def test_the_product_never_imports_the_lab_or_the_emulator() -> None:
    found = [f"{m}:{line} -> {name}" for m, p in MODULES.items()
             for line, name, _ in imports(p, m) if name.split(".")[0] == "specdec_lab"]
    assert found == []


def test_no_import_inside_a_function_in_the_product() -> None:
    found = [f"{m}:{line} -> {name}" for m, p in MODULES.items()
             for line, name, nested in imports(p, m)
             if nested and resolve(name, MODULES) not in (None, "specdec")]
    assert found == []


def test_package_inits_say_what_they_own_and_import_nothing_of_specdec() -> None:
    inits = [p for p in MODULES.values() if p.name == "__init__.py"]
    inits += list((ROOT / "specdec_lab").rglob("__init__.py"))
    for p in inits:
        tree = ast.parse(p.read_text())
        doc = ast.get_docstring(tree) or ""
        assert len(doc.split()) >= 12, f"{p.relative_to(ROOT)}: say what the package owns"
    # the layered packages' __init__s are docstrings only: importing one pulls in nothing
    for pkg in ("config", "plan", "host", "render", "gate", "tune", "verify", "fleet", "report"):
        tree = ast.parse((ROOT / "specdec" / pkg / "__init__.py").read_text())
        assert [n for n in tree.body if not isinstance(n, ast.Expr | ast.ImportFrom)
                or (isinstance(n, ast.ImportFrom) and n.module != "__future__")] == [], pkg


def test_the_emulators_shipped_parts_hold_its_imports() -> None:
    from specdec_lab.images import EMU_PARTS

    lab = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
           for p in (ROOT / "specdec_lab").rglob("*.py")}
    known = {**MODULES, **lab}
    shipped = {m for m, p in known.items()
               if any(p.relative_to(ROOT).as_posix().startswith(part) for part in EMU_PARTS)}
    todo = [m for m in shipped if m.startswith("specdec_lab.emulator")]
    seen: set[str] = set()
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        for _, name, _ in imports(known[m], m):
            target = resolve(name, known)
            if target is not None and target not in seen:
                todo.append(target)
    assert sorted(seen - shipped) == []
