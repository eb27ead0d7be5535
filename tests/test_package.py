"""The package as a user installs it: declared dependencies match the imports, and a wheel built
from the checkout works outside it (profiles found as package data, results where the user says)."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "clover2"
# Declared but never imported by clover2's own code, each for a reason.
NOT_IMPORTED = {"gguf": "transformers reads the built-in GGUF target with it",
                "accelerate": "transformers demands it to load a GGUF file (the built-in target's first load)",
                "ipykernel": "the kernel papermill and nbmake run the notebooks in",
                "jupyter-book": "builds the book (a command, not a library)",
                "sphinx-mathjax-offline": "a Sphinx extension the book build loads: MathJax served from the build"}


# Modules run by another Python, with that environment's packages: none of this project's dependencies.
ELSEWHERE = {"openvino_worker.py": "OpenVINO GenAI's side, run by the Python that .ci/openvino makes"}


def _imports(folder: Path) -> set[str]:
    """Top-level third-party distributions imported by the modules under `folder` (`ELSEWHERE` aside)."""
    names = set()
    for path in (p for p in folder.rglob("*.py") if p.name not in ELSEWHERE):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names.add(node.module.split(".")[0])
    dists = importlib.metadata.packages_distributions()
    return {d.lower().replace("_", "-")
            for n in names - {"clover2"} - set(sys.stdlib_module_names) for d in dists.get(n, [n])}


def _declared() -> dict[str, set[str]]:
    """pyproject's dependencies as installed: extra name ("" for core) -> distribution names."""
    out: dict[str, set[str]] = {}
    for req in importlib.metadata.requires("clover2") or []:
        name = re.match(r"[A-Za-z0-9_.-]+", req).group(0).lower().replace("_", "-")
        extra = re.search(r'extra == "([^"]+)"', req)
        out.setdefault(extra.group(1) if extra else "", set()).add(name)
    return out


def test_declared_dependencies_are_the_imported_ones():
    declared = _declared()
    core, book, adapter = declared[""], declared["book"], declared["adapter"]
    research = _imports(PACKAGE / "research")
    library = _imports(PACKAGE) - research - {"peft"}  # peft: imported only to merge a LoRA adapter
    assert library <= core, f"imported by the library but not declared in core: {library - core}"
    assert research - core <= book, f"imported by clover2.research but not in the book extra: {research - core - book}"
    assert adapter == {"peft"}
    used = _imports(PACKAGE) | set(NOT_IMPORTED)
    assert core | book | adapter <= used, f"declared but never used: {(core | book | adapter) - used}"


@pytest.mark.slow
def test_a_wheel_works_outside_the_checkout(tmp_path):
    src = tmp_path / "src"  # a copy, so that the build writes nothing into the checkout
    shutil.copytree(PACKAGE, src / "clover2", ignore=shutil.ignore_patterns("__pycache__", "_version.py"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(PACKAGE.parent / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(src)], check=True, capture_output=True)
    wheel = next((tmp_path / "dist").glob("clover2-*.whl"))
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    env = os.environ | {"PYTHONPATH": str(site), "CLOVER2_RESULTS": str(tmp_path / "out")}
    work = tmp_path / "elsewhere"
    work.mkdir()
    run = lambda *args: subprocess.run([sys.executable, *args], cwd=work, env=env, capture_output=True, text=True)  # noqa: E731
    code = ("import clover2, clover2.profiles as p, clover2.paths as r; "
            "print(clover2.__file__); print(p.load_profile('cpu').name, p.known_profiles()); print(r.results_root())")
    out = run("-c", code)
    assert out.returncode == 0, out.stderr
    where, profiles, results = out.stdout.splitlines()
    assert where.startswith(str(site)) and profiles.startswith("cpu [") and "smoke" in profiles
    assert results == str(tmp_path / "out")
    version = run("-m", "clover2", "--version")
    assert version.returncode == 0 and version.stdout.startswith("clover2 ")
    nb = run("-m", "clover2", "notebooks", "--profile", "smoke")
    assert nb.returncode == 2 and "clone of the repository" in nb.stderr


def test_a_missing_extra_is_named_with_its_install_command():
    from clover2.errors import Clover2Error, require_extra

    with pytest.raises(Clover2Error, match=r"pip install 'clover2\[book\]'"):
        require_extra("book", "json", "no_such_module_for_clover2")
    require_extra("book", "json")  # present: nothing happens


LAYERS = ("decoding", "drafts", "training", "measure", "profiles", "research")  # each imports only those before it
BASE = ("errors", "files", "paths", "wheels", "load")  # top-level helpers: import no subpackage


def test_no_module_imports_from_a_higher_layer():
    """The house rule the README's layout states: decoding < drafts < training < measure < research, and the
    top-level helpers below them all; every import is checked, those inside functions too."""
    package = PACKAGE
    wrong = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        if parts[0] in LAYERS:
            allowed = set(LAYERS[:LAYERS.index(parts[0]) + 1]) | set(BASE)
        elif parts[0] in BASE:
            allowed = set(BASE)
        else:
            continue  # the command line brings the layers together
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for name in names:
                head = name.split(".")
                if head[0] == "clover2" and len(head) > 1 and head[1] not in allowed and head[1] != "__init__":
                    wrong.append(f"{path.relative_to(package)} imports {name}")
    assert not wrong, wrong


BOOK_ONLY = ("matplotlib", "seaborn", "papermill", "nbformat", "IPython", "clover2.research")
BLOCKER = """
import importlib.abc, sys
class Blocked(importlib.abc.MetaPathFinder):  # what a core install lacks, refused at import, however it is asked
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in {blocked!r}):
            raise ModuleNotFoundError(f"blocked for this test: {{name}}", name=name)
sys.meta_path.insert(0, Blocked())
"""


def _without_the_book(tmp_path, code: str) -> subprocess.CompletedProcess:
    """`code` in a Python whose every import of the book's extras or of clover2.research fails at run time."""
    (tmp_path / "sitecustomize.py").write_text(BLOCKER.format(blocked=BOOK_ONLY))
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(PACKAGE.parent)])}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path)


def test_the_library_and_its_commands_run_without_the_research_layer(tmp_path):
    """Every module below research imports, and the library's commands parse and run, with the book's
    extras and clover2.research unimportable (a run-time check: it also catches an import the AST walk
    cannot see, such as importlib.import_module)."""
    code = ("import importlib, pkgutil, clover2\n"
            "mods = [m.name for m in pkgutil.walk_packages(clover2.__path__, 'clover2.')\n"
            "        if not m.name.startswith('clover2.research') and m.name != 'clover2.__main__']\n"
            "for m in mods: importlib.import_module(m)\n"
            "from clover2.cli import main\n"
            "from clover2.profiles import load_profile\n"
            "assert load_profile('study').design['reference'] == 'eagle1'\n"
            "assert main(['targets']) == 0\n"
            "for cmd in ('generate', 'bench', 'train', 'prepare-data', 'cost-curve', 'coverage'):\n"
            "    try: main([cmd, '--help'])\n"
            "    except SystemExit as e: assert e.code == 0, cmd\n"
            "print(len(mods))")
    out = _without_the_book(tmp_path, code)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.strip().splitlines()[-1]) > 30
    planted = _without_the_book(tmp_path, "import importlib; importlib.import_module('clover2.research.design')")
    assert planted.returncode != 0 and "blocked for this test: clover2.research" in planted.stderr  # it can fail


def test_the_command_lines_help_starts_without_torch():
    """`clover2 --help` and a command's help name the architectures and engines without loading the models."""
    out = subprocess.run([sys.executable, "-c", "import sys; from clover2.cli import main\n"
                          "try:\n    main(['train', '--help'])\nexcept SystemExit:\n    pass\n"
                          "print('torch' in sys.modules)"], capture_output=True, text=True, check=True).stdout
    assert "clover2" in out and "eagle3" in out and out.strip().endswith("False")
