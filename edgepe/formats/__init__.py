"""Artifact formats: one module per format, holding its writer AND its reader, so the bytes are
defined once (issue 21).

- ``onnx``: the checked graph (``prepare``) and its file check (``check_file``);
- ``npy``: a table after a NumPy 1.0 header (``prepare``, ``read``, ``open_rows``, ``check_file``);
- ``bin``: the raw table bytes, plain or bit-packed, shared by ``npy`` and ``c`` (``prepare``,
  ``read``, ``open_rows``, ``dequantise``, ``check_file``);
- ``c``: C99 headers, a table or a compute function (``prepare``, ``check_file``);
  ``c_schemes`` lists the schemes it computes;
- ``pte``: ExecuTorch programs (``prepare``, ``Program``, ``check_file``).

The exporter (``edgepe.export.prepare``), the runtime (``edgepe.runtime``) and the verifier
(``edgepe.verify``) import the format they need, lazily: this package imports nothing.
"""
