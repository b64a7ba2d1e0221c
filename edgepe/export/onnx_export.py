"""Old home of the ONNX format, kept as a re-export for ``edgepe.targets`` (changed in parallel
with issue 21's split); everything else imports ``edgepe.formats.onnx``. Remove once
``edgepe/targets`` imports from there."""

from edgepe.formats.onnx import check_options, output_shape

__all__ = ["check_options", "output_shape"]
