"""The designed study's results folder, written from its records alone: `clover2 study report`.

From `runs.csv`, `replays.csv` and `sittings.csv` (and the published drafts' check and the speed runs where
they exist) it writes every table of `clover2.research.verdicts.analyze` as a CSV, the figures that carry
the argument (a forest plot of every comparison against the paper's band, the primary comparisons per task
beside the paper's, the learning curve) and the results page, `README.md`. Nothing on it is typed by hand.

While amendment 1's grids are still running (the primary arms' or the reference's rate not yet chosen
under its rules), the page reads the study by the protocol's rules from before it, and says so
(book/protocol.md: nothing decided is decided again until its block is finished).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from clover2.files import write_csv, write_text
from clover2.measure.provenance import machine
from clover2.research import paper
from clover2.research.design import DesignConfig, Experiment
from clover2.research.figures import forest, per_task_ratios, save, study_curve
from clover2.research.verdicts import (
    analyze,
    claim_band,
    drawn_apart,
    machine_text,
    machine_time,
    page,
    power_rule,
    speed_table,
    superseded,
    with_cpu_reading,
)

FIGURES = "figures"  # results/<profile>/figures/: the page's images


def write_report(experiment: Experiment) -> dict[str, pd.DataFrame]:
    """Every table, figure and the page of the study into its results folder; returns the tables."""
    results, dev = experiment.lab.results, experiment.dev()
    design = experiment.design if experiment.design.settled(dev) else experiment.design.before_amendment()
    runs = experiment.records()
    replays = pd.read_csv(experiment.replays_csv) if experiment.replays_csv.exists() else pd.DataFrame()
    tables = analyze(design, runs, replays, dev, seen=experiment.seen_in_development())
    rule = power_rule(experiment.protocol, replays, dev) if not replays.empty else pd.DataFrame()
    if not rule.empty:  # once an arm with extra seeds has its first ones: read on the protocol's own seeds
        tables["power_rule"] = rule
    summary = results.parent / "cpu" / "ablations" / "summary.csv"  # the cpu profile's one-seed ablations
    if "parts" in tables and summary.exists():
        tables["parts"] = with_cpu_reading(tables["parts"], pd.read_csv(summary))
    for name, df in tables.items():
        write_csv(results / f"{name}.csv", df)
    if design is experiment.design and not replays.empty:  # the readings before amendment 1 stay beside its own
        before = analyze(design.before_amendment(), runs, replays, dev).get("verdicts", pd.DataFrame())
        tables["earlier"] = before[before.family == "primary"] if len(before) else before
    if (results / "earlier-bootstrap.csv").exists():  # on the page only: the record committed before amendment 1
        tables["earlier_bootstrap"] = pd.read_csv(results / "earlier-bootstrap.csv")
    if (experiment.published() / "check.csv").exists():  # on the page only: the CSV is check.csv itself
        tables["published"] = pd.read_csv(experiment.published() / "check.csv")[
            ["arm", "tree", "committed_tau", "published_tau", "difference", "cpu", "date"]]
    env = json.loads((experiment.speed_dir / "env.json").read_text()) if (experiment.speed_dir / "env.json").exists() \
        else {}
    if env and not superseded(env, experiment.published()):  # on the page only, while its drafts are the study's
        tables["speed"] = speed_table(pd.read_csv(experiment.speed_dir / "bench.csv"),
                                      pd.read_csv(experiment.speed_dir / "paired.csv"),
                                      env, design.reference)
    cpu_form = experiment.speed_claims_dir  # amendment 1's speed claims, once timed: on the page only
    for name, csv in (("speed_claims", "claims.csv"), ("speedups", "speedups.csv"), ("tree_choice", "calibration.csv")):
        if (cpu_form / csv).exists():
            tables[name] = pd.read_csv(cpu_form / csv)
    if "speed_claims" in tables:  # the machine it was timed on, said once under the claims
        tables["speed_claims"].attrs["env"] = json.loads((cpu_form / "env.json").read_text())
    sittings = pd.read_csv(experiment.sittings_csv) if experiment.sittings_csv.exists() else pd.DataFrame()
    cpus = machine_text(machine_time(runs, sittings, design.main)) if len(runs) else machine()["cpu_name"]
    commits = f"{runs.commit.nunique()} commits" if len(runs) else "-"
    status = experiment.status()
    outside = runs[~runs.run.isin(status.run)] if len(runs) else runs  # trained, then left by the plan
    if len(outside):
        rates = outside.groupby(["arm", "lr"]).seed.nunique()
        cpus += (f"; {len(outside)} of these runs are outside the plan as it stands, kept in `runs.csv` and in no "
                 "current verdict (" + ", ".join(f"{arm} at lr {lr:g}, {n} seed{'s' * (n != 1)}"
                                            for (arm, lr), n in rates.items())
                 + ": a rate its grid no longer chooses; the learning curve and the readings by the protocol's first "
                 "rules read those)")
    write_csv(results / "status.csv", status)  # the plan's every run and its state: the front page counts it
    downloads = sorted(str(p.relative_to(results)) for p in (*results.glob("*.csv"), *results.glob("speed*/*.csv"),
                                                             *experiment.published().glob("*/draft.*"))
                       if "speed" in tables or not p.is_relative_to(experiment.speed_dir))  # not a superseded run
    write_page(results, design, tables, status, machine=cpus, commits=commits,
               amended=design is experiment.design, downloads=downloads)
    return tables


def write_page(results: Path, design: DesignConfig, tables: dict[str, pd.DataFrame], status: pd.DataFrame, *,
               machine: str, commits: str, amended: bool = True, downloads: list[str] = ()) -> dict[str, str]:
    """The figures (`draw_figures`) and the page, `README.md`, into `results`, from the study's tables;
    returns the figures drawn, by the table each is drawn from."""
    figures = draw_figures(design, tables, results / FIGURES)
    write_text(results / "README.md", page(design, tables, status, machine=machine, commits=commits,
                                           figures=figures, amended=amended, downloads=downloads))
    return figures


def draw_figures(design: DesignConfig, tables: dict[str, pd.DataFrame], out: Path) -> dict[str, str]:
    """The page's figures, each drawn from the table it shows (where that table has rows): every comparison
    as a forest plot (`verdicts`), the primary ones per task beside the paper's (`per_task`), the learning
    curve (`curve`, with its seeds). Returns each one's path relative to the page, by table."""
    excess = paper.ratios().extra_tokens_ratio
    drawn = {
        "verdicts": ("forest.png", lambda: forest(tables["verdicts"], band=claim_band(design), margin=design.margin,
                                                  excess_band=(excess.min(), excess.max()),
                                                  apart=drawn_apart(design))),
        "per_task": ("per-task.png", lambda: per_task_ratios(tables["per_task"], paper_targets=paper.ratios())),
        "curve": ("curve.png", lambda: study_curve(tables["curve"], arms=[*design.primary, design.reference])),
    }
    out.mkdir(parents=True, exist_ok=True)
    made = {}
    for key, (name, draw) in drawn.items():
        if not tables.get(key, pd.DataFrame()).empty:
            save(draw(), out / name)
            made[key] = f"{FIGURES}/{name}"
    return made
