"""The contract every layer shares (the lowest layer: it imports no other edgepe package).

- ``errors``: the exceptions a command turns into one line and an exit code;
- ``version``: the package's version (``edgepe.__version__`` re-exports it);
- ``config``: ``ExportConfig``, ``Prepared``, ``base_manifest``, the option values and checks;
- ``manifest``: the manifest's schema, canonical bytes, safe reading and validation;
- ``commit``: atomic output (a file, or an artifact and its manifest, committed by renames);
- ``checkpoint``: reading a state_dict safely, and the sha256 a manifest records;
- ``progress``: the progress bar long work reports to.
"""
