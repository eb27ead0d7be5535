"""Notebook parameters: a bad one fails in the notebook's first cells with a clear message.
(The notebooks themselves run end to end under nbmake on the smoke profile: `make test`.)"""

from __future__ import annotations

from pathlib import Path

import nbformat
import papermill
import pytest
from conftest import tiny_target

from clover2.drafts import build_draft
from clover2.drafts.checkpoint import save_draft
from clover2.drafts.config import DraftConfig
from clover2.errors import Clover2Error
from clover2.research.lab import Lab
from clover2.research.notebooks import NOTEBOOKS, for_the_book, run_notebooks

SOURCE = Path(__file__).resolve().parents[1] / "notebooks"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_notebook_has_one_parameters_cell_and_no_outputs(name):
    nb = nbformat.read(SOURCE / f"{name}.ipynb", as_version=4)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and "profile" in tagged[0].source
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


def test_unknown_profile_fails_in_the_first_cell_after_the_parameters(tmp_path):
    with pytest.raises(papermill.PapermillExecutionError) as err:
        papermill.execute_notebook(SOURCE / "04_speedup.ipynb", tmp_path / "out.ipynb",
                                   parameters={"profile": "no-such-profile"}, cwd=str(SOURCE),
                                   progress_bar=False, kernel_name="python3")
    e = err.value
    assert e.ename == "Clover2Error" and "unknown profile 'no-such-profile'" in e.evalue
    assert "Lab.open" in e.source  # the first code cell after the parameters, before any work


def test_unknown_notebook_or_profile_is_refused_before_any_runs():
    with pytest.raises(Clover2Error, match="unknown notebooks"):
        run_notebooks("smoke", source=SOURCE, only=["06_extra"])
    with pytest.raises(Clover2Error, match="unknown profile"):
        run_notebooks("gpu-huge", source=SOURCE)
    with pytest.raises(Clover2Error, match="clone of the repository"):
        run_notebooks("smoke", source=SOURCE.parent / "book")


def test_missing_target_path_is_a_clear_error():
    with pytest.raises(Clover2Error, match="not an existing folder"):
        Lab.open("smoke", target="/models/no-such-model")


@pytest.mark.slow
def test_drafts_for_another_target_are_refused_at_open(tmp_path, monkeypatch, smollm2):
    from clover2.profiles import Profile

    monkeypatch.setattr(Profile, "load_target", lambda self, name=None, **_: smollm2)  # the run's one embedded target
    other = tiny_target("llama")
    cfg = DraftConfig.for_arch("clover2", num_heads=2)
    save_draft(tmp_path / "clover2", build_draft(cfg, other), other, cfg, extra={})
    with pytest.raises(Clover2Error, match="trained for target"):
        Lab.open("smoke", drafts=tmp_path)


def test_the_book_copy_names_its_profile_and_hides_the_run_log():
    nb = nbformat.read(SOURCE / "06_at_a_glance.ipynb", as_version=4)
    code = next(c for c in nb.cells if c.cell_type == "code" and "parameters" not in c.metadata.get("tags", []))
    code.outputs = [nbformat.v4.new_output("stream", name="stderr", text="progress"),
                    nbformat.v4.new_output("stream", name="stdout", text="result")]
    once = for_the_book(nb, "06_at_a_glance.ipynb", "cpu-full", {"commit": "abc1234", "cpu": "AMD EPYC"})
    assert once.metadata["clover2"]["commit"] == "abc1234"
    title = next(c.source for c in once.cells if c.cell_type == "markdown" and c.source.startswith("# "))
    assert title.startswith("# cpu-full: ") and not title.startswith("# cpu-full: cpu-full: ")
    assert [o.name for o in code.outputs] == ["stdout"]
    twice = for_the_book(once, "06_at_a_glance.ipynb", "cpu-full")  # a copy made again keeps one prefix
    assert sum(c.source.count("cpu-full: ") for c in twice.cells if c.source.startswith("# ")) == 1
    assert all("remove-cell" in c.metadata.tags for c in twice.cells if "parameters" in c.metadata.get("tags", []))
