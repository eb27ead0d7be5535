"""The provenance page lists every published results record with its commit, machine and date."""

import json

import nbformat

from clover2.research.artifacts import artifacts, page


def test_every_published_record_is_listed_and_smoke_runs_are_not(tmp_path):
    (tmp_path / "cpu" / "bench").mkdir(parents=True)
    (tmp_path / "cpu" / "notebooks").mkdir()
    (tmp_path / "smoke" / "bench").mkdir(parents=True)
    (tmp_path / "cpu" / "provenance.json").write_text(json.dumps({"commit": "abc1234-dirty", "cpu": "AMD EPYC"}))
    nb = nbformat.v4.new_notebook(metadata={"papermill": {"start_time": "2026-12-02T17:29:46"}})
    nbformat.write(nb, tmp_path / "cpu" / "notebooks" / "01.ipynb")  # older than its own record: the profile's
    nb.metadata["clover2"] = {"commit": "9999999", "cpu": "AMD EPYC"}  # re-rendered later, at another commit
    nbformat.write(nb, tmp_path / "cpu" / "notebooks" / "02.ipynb")
    nbformat.write(nb, tmp_path / "cpu" / "notebooks" / ".03.942.tmp.ipynb")  # a run still writing its copy: not listed
    for folder, commit in (("cpu/bench", "def5678"), ("smoke/bench", "0000000")):
        (tmp_path / folder / "env.json").write_text(json.dumps({"commit": commit, "cpu": "Intel(R) Xeon(R) Processor",
                                                                 "date": "2026-11-30T13:11:04+00:00"}))
    table = artifacts(tmp_path).set_index("folder")
    assert list(table.index) == ["cpu/notebooks/01.ipynb", "cpu/notebooks/02.ipynb", "cpu/bench"]
    assert table.loc["cpu/notebooks/01.ipynb", "commit"] == "abc1234-dirty"
    assert table.loc["cpu/notebooks/02.ipynb", "commit"] == "9999999"
    assert table.loc["cpu/bench", "machine"] == "Intel Xeon"  # trademarks dropped: the table fits the column
    assert table.loc["cpu/notebooks/01.ipynb", "date"] == "2026-12-02" and table.loc["cpu/bench", "date"] == "2026-11-30"
    text = page(tmp_path)
    assert "3 records, 3 commits, 1 from a tree with uncommitted changes" in text and "`abc1234-dirty`" in text
