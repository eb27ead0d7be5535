"""The page on using a draft: its commands and its Python run as written, with the published draft."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PAGE = (ROOT / "book" / "use.md").read_text()
DRAFT = ROOT / "results" / "study" / "drafts" / "clover2-official"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE, flags=re.S)


def _run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    """`args` in a process group of its own, the whole group killed if it outlives 600 s (a bash script's
    children would otherwise go on running after the test)."""
    with subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True, **kwargs) as proc:
        try:
            out, err = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def test_the_page_names_a_draft_that_is_published_or_still_to_come():
    assert "results/study/drafts/clover2" in PAGE and len(_blocks("bash")) == 1 and len(_blocks("python")) == 1


def _measure_kernels_once(monkeypatch) -> None:
    """The page's commands and its Python take the kernels measured fastest (`auto`); measured here once,
    at the thread count a fresh process starts with, and cached for them. Left to them, each would measure
    them anew while the suite's other worker loads the machine (a choice timed under load is not cached),
    three times over."""
    import torch

    import clover2.decoding.kernels as K
    from clover2.decoding.target import load_target

    fresh = _run([os.sys.executable, "-c", "import torch; print(torch.get_num_threads())"])
    torch.set_num_threads(int(fresh.stdout))  # the one_thread fixture sets 1 again after the test
    monkeypatch.setattr(K, "other_share", lambda start: 0.0)  # cached whatever the other worker does
    load_target("smollm2-135m-instruct", dtype="float32", kernels="auto")


@pytest.mark.skipif(not (DRAFT / "draft.safetensors").exists(), reason="the study has not published its drafts yet")
def test_the_commands_and_the_python_run_as_written(monkeypatch):
    _measure_kernels_once(monkeypatch)
    env = {**os.environ, "PATH": f"{Path(os.sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    script = _blocks("bash")[0].replace('export PATH="$PWD/.venv/bin:$PATH"\n', "")  # the test's own interpreter
    done = _run(["bash", "-euo", "pipefail", "-c", script], env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() and '"text"' in done.stdout  # the second command prints JSON
    quickstarts = {}
    for where, text in (("book/use.md", PAGE), ("README.md", (ROOT / "README.md").read_text())):
        doctests = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if b.startswith(">>>")]
        assert len(doctests) == 1, where  # the quickstart, as a doctest
        quickstarts[where] = doctests[0]
    for doctest_text in set(quickstarts.values()):  # the same quickstart on both pages runs once
        code = ("import doctest, sys; t = doctest.DocTestParser().get_doctest(sys.argv[1], {}, 'quickstart', None, 0);"
                " r = doctest.DocTestRunner(); r.run(t); sys.exit(bool(r.failures))")
        done = _run([os.sys.executable, "-c", code, doctest_text])
        pages = [where for where, text in quickstarts.items() if text == doctest_text]
        assert done.returncode == 0, f"{pages}: {done.stdout}{done.stderr}"
