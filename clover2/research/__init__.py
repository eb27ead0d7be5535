"""The research layer behind the notebooks and the book: the study of a profile, the draft taken
apart, figures, the paper's numbers and the papermill runs. It needs the `book` extra."""

from clover2.errors import require_extra

require_extra("book", "matplotlib", "seaborn", "papermill", "nbformat")

from clover2.research import tables  # noqa: E402,F401  (DataFrames in a notebook display as the book shows them)
