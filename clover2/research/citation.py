"""The citation file, generated from the book's configuration so that the two cannot disagree: the
title, the authors, the date and the repository's address are set once, in `_config.yml`, and
`CITATION.cff` (Citation File Format 1.2) is written from them. An empty address (the repository has
no public one yet) leaves the address out of the file.

    python -m clover2.research.citation _config.yml CITATION.cff
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from clover2.files import write_text

MESSAGE = ("Cite the paper for the method and this book for the code and the numbers, with the version and "
           "commit that `clover2 --version` prints.")
LICENSE = "Apache-2.0"
# the paper under test: the preferred citation for the method
PAPER = {"type": "article", "title": "Clover-2: Accurate Inference for Regressive Lightweight Speculative Decoding",
         "authors": [{"family-names": "Xiao", "given-names": "Bin"}, {"family-names": "Gui", "given-names": "Lujun"},
                     {"family-names": "Su", "given-names": "Lei"}, {"family-names": "Chen", "given-names": "Weipeng"}],
         "year": 2024, "journal": "arXiv preprint",
         "identifiers": [{"type": "other", "value": "arXiv:2408.00264"}], "url": "https://arxiv.org/abs/2408.00264"}


def repository_url(config: dict) -> str:
    """The repository's address as `_config.yml` gives it ("" where it has none yet)."""
    return ((config.get("repository") or {}).get("url") or "").strip()


def citation(config: dict) -> dict:
    """The citation file's fields from the book's configuration (`_config.yml`, parsed)."""
    missing = [k for k in ("title", "author", "date") if not config.get(k)]
    if missing:
        raise ValueError(f"_config.yml: the citation needs {', '.join(missing)}")
    cff = {"cff-version": "1.2.0", "message": MESSAGE, "title": config["title"], "type": "software",
           "authors": [{"name": config["author"]}], "date-released": str(config["date"]), "license": LICENSE}
    if url := repository_url(config):
        cff |= {"repository-code": url, "url": url}
    return cff | {"preferred-citation": PAPER}


def cff_text(config: dict) -> str:
    return ("# Generated from _config.yml by `python -m clover2.research.citation`; edit that file, not this one.\n"
            + yaml.safe_dump(citation(config), sort_keys=False, allow_unicode=True, width=1000))


if __name__ == "__main__":
    config_path, out = (Path(a) for a in (sys.argv[1:] if len(sys.argv) == 3 else ["_config.yml", "CITATION.cff"]))
    write_text(out, cff_text(yaml.safe_load(config_path.read_text())))
