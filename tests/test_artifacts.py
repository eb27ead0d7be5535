"""The provenance page lists every published results record with its commit, machine and date; every
record names its machine precisely."""

import json
from pathlib import Path

import nbformat
import numpy as np
import pytest

from clover2.drafts.checkpoint import load_draft, probe
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
    (tmp_path / "cpu-full" / "bench").mkdir(parents=True)  # a record with the CPU's short name: the name shown
    (tmp_path / "cpu-full" / "bench" / "env.json").write_text(json.dumps({
        "commit": "def5678", "cpu": "AMD EPYC Processor", "cpu_name": "AMD EPYC Zen 4 (AVX-512 BF16)",
        "date": "2026-12-01"}))
    table = artifacts(tmp_path).set_index("folder")
    assert list(table.index) == ["cpu/notebooks/01.ipynb", "cpu/notebooks/02.ipynb", "cpu/bench", "cpu-full/bench"]
    assert table.loc["cpu-full/bench", "machine"] == "AMD EPYC Zen 4 (AVX-512 BF16)"
    assert table.loc["cpu/notebooks/01.ipynb", "commit"] == "abc1234-dirty"
    assert table.loc["cpu/notebooks/02.ipynb", "commit"] == "9999999"
    assert table.loc["cpu/bench", "machine"] == "Intel Xeon"  # trademarks dropped: the table fits the column
    assert (table.loc["cpu/notebooks/01.ipynb", "date"] == "2026-12-02"
            and table.loc["cpu/bench", "date"] == "2026-11-30")
    text = page(tmp_path)
    assert "4 records, 3 commits, 1 from a tree with uncommitted changes" in text and "`abc1234-dirty`" in text
    # the folders one commit made on one machine and day share a row
    assert "| `cpu/bench` | `def5678` | Intel Xeon | 2026-11-30 |" in text and text.count("`def5678`") == 2


ZEN4 = {"vendor_id": "AuthenticAMD", "cpu family": "25", "model": "17", "stepping": "1",
        "model name": "AMD EPYC Processor", "flags": "fpu sse avx avx2 fma avx512f avx512_vnni avx512_bf16 sha_ni"}


def test_env_json_names_the_cpu_by_vendor_family_model_stepping_and_flags(monkeypatch):
    """Two "AMD EPYC Processor"s (a Zen 3 and a Zen 4) are told apart by family and model."""
    from clover2.measure import provenance

    monkeypatch.setattr(provenance, "cpuinfo", lambda: ZEN4)
    here = provenance.machine()
    assert {k: here[k] for k in ("cpu", "cpu_vendor", "cpu_family", "cpu_model", "cpu_stepping", "cpu_flags")} == {
        "cpu": "AMD EPYC Processor", "cpu_vendor": "AuthenticAMD", "cpu_family": 25, "cpu_model": 17, "cpu_stepping": 1,
        "cpu_flags": ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16"]}
    assert here["cpu_name"] == "AMD EPYC Zen 4 (AVX-512 BF16)"


@pytest.mark.parametrize("cpu, name", [
    ({"cpu": "AMD EPYC Processor", "cpu_vendor": "AuthenticAMD", "cpu_family": 25, "cpu_model": 0x01,
      "cpu_flags": ["avx2", "fma"]}, "AMD EPYC Zen 3 (AVX2)"),
    ({"cpu": "AMD EPYC 7R13 Processor", "cpu_vendor": "AuthenticAMD", "cpu_family": 25, "cpu_model": 0x30,
      "cpu_flags": ["avx2"]}, "AMD EPYC Zen 3 (AVX2)"),
    ({"cpu": "AMD EPYC 9R14", "cpu_vendor": "AuthenticAMD", "cpu_family": 25, "cpu_model": 0xA0,
      "cpu_flags": ["avx2", "avx512f", "avx512_bf16"]}, "AMD EPYC Zen 4 (AVX-512 BF16)"),
    ({"cpu": "AMD EPYC 9R45", "cpu_vendor": "AuthenticAMD", "cpu_family": 26, "cpu_model": 0x02,
      "cpu_flags": ["avx2", "avx512f"]}, "AMD EPYC Zen 5 (AVX-512)"),
    ({"cpu": "Intel(R) Xeon(R) Processor", "cpu_vendor": "GenuineIntel", "cpu_family": 6, "cpu_model": 143,
      "cpu_flags": ["avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"]}, "Intel Xeon (AVX-512, AMX-BF16)"),
    ({"cpu": "Neoverse-V2", "cpu_vendor": "", "cpu_flags": []}, "Neoverse-V2")])
def test_a_short_cpu_name_follows_from_vendor_family_model_and_flags(cpu, name):
    from clover2.measure.provenance import cpu_name

    assert cpu_name(cpu) == name


PUBLISHED = sorted((Path(__file__).parents[1] / "results").glob("*/drafts/*/draft.safetensors"))


@pytest.mark.skipif(not PUBLISHED, reason="no draft published in results/ yet")
@pytest.mark.parametrize("weights", PUBLISHED, ids=lambda p: f"{p.parents[2].name}-{p.parent.name}")
def test_a_published_draft_computes_what_it_computed_when_published(smollm2, weights):
    """Each committed draft loads on the embedded target and proposes, with the same logits, what it
    proposed when it was published (its `probe`): a change of the code that moved what a trained
    draft computes, and so its tau, fails here."""
    folder = weights.parent
    recorded = json.loads((folder / "draft.json").read_text())["probe"]
    got = probe(load_draft(folder, smollm2), smollm2)
    assert got["tokens"] == recorded["tokens"]
    np.testing.assert_allclose(got["logits"], recorded["logits"], atol=2e-3)
