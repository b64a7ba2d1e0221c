"""Which schemes the C format computes (``--format c --mode compute``).

Its own module because the table formats' size check names ``--format c`` as a way out for
these schemes, and ``c`` itself builds on the table formats (``bin``'s bytes): reading the list
from here keeps ``bin`` from importing ``c``.
"""

# Schemes with a C compute function: the bit family (shifts and masks) and the demo's binary.
COMPUTE_SCHEMES = (
    "binary",
    "binary-bits",
    "binary-signed",
    "binary-smooth",
    "gray",
    "binary-multilevel",
    "binary-2d",
    "hierarchical",
    "hybrid-int-binary",
    "binary-gated",
    "fourier-binary",
)
# Float schemes with a C compute function: a small float32 array (the frequencies, the slopes)
# and libm's sinf/cosf, or one multiply (issue 21). Their header also includes <math.h>.
FLOAT_COMPUTE_SCHEMES = ("sinusoidal", "rope", "alibi")
COMPUTE_SCHEMES += FLOAT_COMPUTE_SCHEMES
