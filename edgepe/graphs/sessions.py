"""onnxruntime session options for every session edgepe opens on a graph (issue 41).

onnxruntime logs to stderr itself, in colour, through its environment's default logger and each
session's logger: an ERROR line ("[E:onnxruntime:, sequential_executor.cc ...] Non-zero status
code returned while running Gather node") before the exception edgepe turns into its one
``error:`` line, so a refusal printed two lines. edgepe reports every failure itself (the
exception's message), so both loggers keep FATAL only (severity 4; 0 verbose .. 4 fatal,
``onnxruntime.SessionOptions.log_severity_level``). The verifier's sessions, ``edgepe.load``'s
and graft's proof all take their options from ``quiet_options``.
"""

from __future__ import annotations

# onnxruntime's severities: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal
FATAL_ONLY = 4


def quiet_options():
    """A fresh ``onnxruntime.SessionOptions`` logging FATAL only, with the process's default
    logger (onnxruntime's environment: telemetry, provider probing) set the same way."""
    import onnxruntime as ort

    ort.set_default_logger_severity(FATAL_ONLY)
    options = ort.SessionOptions()
    options.log_severity_level = FATAL_ONLY
    return options
