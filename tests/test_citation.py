"""The repository's address, the title, the authors and the date are set once, in `_config.yml`: the
citation file is generated from it and the page header's button follows it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from clover2.research.citation import cff_text, citation, repository_url

ROOT = Path(__file__).parents[1]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())


def test_the_committed_citation_file_is_the_configurations():
    assert (ROOT / "CITATION.cff").read_text() == cff_text(CONFIG)


def test_the_citation_reads_title_authors_and_date_from_the_configuration():
    cff = citation(CONFIG)
    assert cff["title"] == CONFIG["title"] and cff["authors"] == [{"name": CONFIG["author"]}]
    assert cff["date-released"] == str(CONFIG["date"]) and cff["cff-version"] == "1.2.0"
    with pytest.raises(ValueError, match="date"):
        citation({k: v for k, v in CONFIG.items() if k != "date"})


def test_an_address_reaches_the_citation_and_none_is_invented():
    empty = CONFIG | {"repository": {"url": "", "branch": "main"}}
    assert "url" not in citation(empty) and "repository-code" not in citation(empty)
    assert "url" not in citation({k: v for k, v in CONFIG.items() if k != "repository"})
    address = "https://example.org/clover2"
    cff = citation(CONFIG | {"repository": {"url": address}})
    assert cff["url"] == cff["repository-code"] == address
    assert yaml.safe_load(cff_text(CONFIG | {"repository": {"url": address}}))["url"] == address


def test_the_repository_button_is_on_exactly_when_there_is_an_address():
    # Jupyter Book refuses the button without an address, and the button is the header's link to it
    assert bool((CONFIG.get("html") or {}).get("use_repository_button")) == bool(repository_url(CONFIG))
