"""The scheme catalogue: every reference module, imported by name (STYLE 2).

The order below is the order ``edgepe list`` prints. Importing this package imports torch.
"""

# Catalogue order, not alphabetical: the order `edgepe list` prints.
# isort: off
from edgepe.schemes import (  # noqa: F401  (each import registers one scheme)
    binary,
    binary_bits,
    binary_signed,
    binary_smooth,
    gray,
    binary_multilevel,
    integer,
    integer_norm,
    integer_multiscale,
    integer_learnable,
    hybrid_int_binary,
    binary_gated,
    fourier_binary,
    binary_2d,
    hierarchical,
    sinusoidal,
    learned,
    sinusoidal_learned,
    rope,
    alibi,
    gaussian,
    t5_bias,
    mrope,
)

# isort: on
from edgepe.schemes._base import Scheme, bit_select, bits, check_positions, wrap
from edgepe.schemes._registry import (
    FLOAT_EXACT_POSITIONS,
    Param,
    SchemeConfig,
    SchemeSpec,
    build,
    get_class,
    get_spec,
    n_bits,
    resolve,
    scheme_ids,
)

__all__ = [
    "FLOAT_EXACT_POSITIONS",
    "Param",
    "Scheme",
    "SchemeConfig",
    "SchemeSpec",
    "bit_select",
    "bits",
    "build",
    "check_positions",
    "get_class",
    "get_spec",
    "n_bits",
    "resolve",
    "scheme_ids",
    "wrap",
]
