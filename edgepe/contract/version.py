"""The package's version: in the lowest layer, so no module imports the package root for it
(``edgepe.__version__`` re-exports it; pyproject.toml's ``version`` is the same string)."""

__version__ = "0.1.0"
