"""Tables as the book shows them: a notebook that displays a DataFrame shows a plain table, its
index as a first column, numbers rounded by size, missing values as a dash, and at most `MAX_ROWS`
rows (a longer table says how many rows its CSV holds), never pandas' raw HTML (index-name header
rows, NaN cells, "80 rows x 6 columns")."""

from __future__ import annotations

import html as _html
import numbers

import numpy as np
import pandas as pd

MAX_ROWS = 20


def cell(value) -> str:
    """One value as the book prints it: integers whole, other numbers to about three significant
    digits (thousands separated), a missing value as a dash."""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if not isinstance(value, str) and pd.isna(value):
        return "–"
    if isinstance(value, numbers.Integral) or (isinstance(value, float) and value.is_integer() and abs(value) >= 1000):
        return f"{int(value):,}"
    if isinstance(value, float):
        size = abs(value)
        return f"{value:,.0f}" if size >= 100 else f"{value:.1f}" if size >= 10 else \
            f"{value:.2f}" if size >= 1 else f"{value:.3f}"
    return str(value)


def flat(df: pd.DataFrame) -> pd.DataFrame:
    """The index as ordinary columns (unless it is a plain 0..n-1), column levels joined by spaces."""
    if not (isinstance(df.index, pd.RangeIndex) and df.index.name is None):
        df = df.reset_index()
    df = df.copy()
    df.columns = [" ".join(str(c) for c in col if str(c)) if isinstance(col, tuple) else str(col)
                  for col in df.columns]
    return df


def html(df: pd.DataFrame, max_rows: int = MAX_ROWS) -> str:
    """`df` as a plain HTML table (see the module's docstring)."""
    df = flat(df)
    head = "".join(f"<th>{_html.escape(c)}</th>" for c in df.columns)
    rows = "".join("<tr>" + "".join(f"<td>{_html.escape(cell(v))}</td>" for v in row) + "</tr>"
                   for row in df.head(max_rows).itertuples(index=False))
    more = f"<p>The first {max_rows} of {len(df)} rows; the CSV beside the page has them all.</p>" \
        if len(df) > max_rows else ""
    return f'<table class="table clover2-table"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>{more}'


def _show_as_the_book_does() -> None:
    """In a notebook, DataFrames display as `html` makes them."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["text/html"].for_type(pd.DataFrame, html)


_show_as_the_book_does()
