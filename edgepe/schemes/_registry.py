"""The scheme registry: specs, parameter resolution and module construction.

A scheme is one ``nn.Module`` class in one file, registered by id with
``@register(SchemeSpec(...))`` (STYLE 1). The spec carries everything the rest of edgepe needs
to know without reading the module: its parameters and defaults, output kind, export modes,
tolerance and out-of-range policy.
``resolve`` turns user input (strings from the CLI, or Python values) into a validated, fully
defaulted ``SchemeConfig`` before any tensor is allocated; ``build`` makes the module.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from edgepe.contract.checkpoint import load_into, load_param_into
from edgepe.contract.errors import BadParameterError, UnknownSchemeError, did_you_mean
from edgepe.contract.manifest import D_MODEL_LIMIT, HEADS_LIMIT, MAX_LEN_LIMIT  # resolve's caps

# Float32 represents every integer up to 2^24 exactly; schemes that turn positions into floats
# are only defined (and verified) for |position| up to this.
FLOAT_EXACT_POSITIONS = 2**24

# The largest tensor a reference module may hold (the demo's bit table, a learned table): past
# it ``resolve`` refuses the configuration instead of letting the allocation fail or swap.
MODULE_BYTES_LIMIT = 2**31

KINDS = ("pe", "bias", "rope")
MODES = ("compute", "table")
# Every mode a scheme may list: ``sliced`` (sin/cos from position bits and small tables, no
# trigonometric op: edgepe.graphs.sliced) exists for the trig schemes rope and sinusoidal.
ALL_MODES = ("compute", "table", "sliced")
TRIG_MODES = ALL_MODES


def n_bits(max_len: int) -> int:
    """``ceil(log2(max_len + 1))`` as in the demo, computed exactly with integers."""
    return max(1, int(max_len).bit_length())


def min_bits(max_len: int) -> int:
    """``ceil(log2(max_len))`` (at least 1): the fewest bits that keep positions
    ``0 .. max_len - 1`` distinct, the guide's minimum (section 7.1: "L = 512: need d >= 9")."""
    return max(1, (int(max_len) - 1).bit_length())


@dataclass(frozen=True)
class Param:
    """A scheme parameter beyond ``max_len``/``d_model``/``heads``.

    ``type`` is ``int``, ``float``, ``str``, ``"ints"`` (a comma-separated tuple of ints) or
    ``"floats"`` (a comma-separated tuple of finite numbers; ``()`` allowed as a default).
    ``low`` is an inclusive lower bound (``low_open`` makes it exclusive), ``high`` an inclusive
    upper bound. ``default`` may be a function of ``max_len``; ``default_text`` then says it in
    words for ``edgepe list``. ``omit_default``: a parameter added after artifacts were already
    written is left out of ``as_dict`` (so of manifests) at its default, so an older manifest,
    which lacks it, still rebuilds the same bytes; its absence means the default.
    """

    name: str
    default: Any
    type: Any
    doc: str
    low: float | None = None
    low_open: bool = False
    choices: tuple[str, ...] | None = None
    high: float | None = None
    default_text: str | None = None
    omit_default: bool = False

    def describe_default(self) -> str:
        """The default as ``edgepe list`` shows it: ``default_text`` when it depends on max_len."""
        if self.default_text is not None:
            return self.default_text
        return "max_len" if callable(self.default) else str(self.default)

    def default_for(self, max_len: int) -> Any:
        """The default value; a callable default is a function of ``max_len``."""
        return self.default(max_len) if callable(self.default) else self.default

    def parse(self, scheme_id: str, raw: Any) -> Any:
        where = f"--param {self.name} of scheme '{scheme_id}'"
        try:
            if self.type == "ints":
                items = raw.split(",") if isinstance(raw, str) else list(raw)
                value = tuple(int(str(v).strip()) for v in items)
                if not value:
                    raise ValueError
                checks = value
            elif self.type == "floats":
                items = raw.split(",") if isinstance(raw, str) else list(raw)
                if any(isinstance(v, bool) for v in items):
                    raise ValueError
                value = tuple(float(str(v).strip()) for v in items)
                if not value or not all(math.isfinite(v) for v in value):
                    raise ValueError
                checks = value
            elif self.type is int:
                if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                    raise ValueError
                value = int(raw)
                checks = (value,)
            elif self.type is float:
                if isinstance(raw, bool):
                    raise ValueError
                value = float(raw)
                if not math.isfinite(value):
                    raise ValueError
                checks = (value,)
            else:
                value = str(raw)
                checks = ()
        except (TypeError, ValueError):
            kind = {"ints": "comma-separated integers",
                    "floats": "comma-separated finite numbers", int: "an integer",
                    float: "a finite number"}
            raise BadParameterError(
                f"{where} must be {kind.get(self.type, 'a string')}, got {raw!r}"
            ) from None
        if self.choices is not None and value not in self.choices:
            raise BadParameterError(
                f"{where} is {value!r}; allowed: {', '.join(self.choices)}"
            )
        for v in checks:
            if self.low is not None and (v <= self.low if self.low_open else v < self.low):
                op = ">" if self.low_open else ">="
                raise BadParameterError(f"{where} must be {op} {self.low:g}, got {raw!r}")
            if self.high is not None and v > self.high:
                raise BadParameterError(f"{where} must be <= {self.high:g}, got {raw!r}")
        return value


@dataclass(frozen=True)
class SchemeSpec:
    """What edgepe knows about a scheme without building it.

    - ``kind``: ``pe`` (positions -> ``[N, D]``), ``bias`` (positions, key_positions ->
      ``[H, N, M]``) or ``rope`` (positions -> ``[N, d]`` = ``[cos | sin]``, plus ``apply``).
    - ``d_model``: the default width, an int or ``f(max_len, params) -> int``; ``None`` when the
      scheme has no width (bias schemes).
    - ``tolerance``: ``(rtol, atol)`` for comparing an artifact with the reference; ``(0, 0)`` for
      integer and bit outputs. ``tolerance_why`` says where a float tolerance comes from.
    - ``oob``: the out-of-range policy in compute mode, in words (``wrap``: bits of
      ``pos mod 2^n``; ``extrapolate``: the formula for every position; ``clamp``: to
      ``[0, max_len - 1]``). Table artifacts always clamp to their rows.
    - ``position_limit``: ``|position|`` above which the scheme is undefined (float precision),
      or ``None`` when every int64 is defined.
    - ``arity``: ``f(config) -> k`` for schemes whose positions are ``[N, k]``, else ``None``.
    """

    id: str
    source: str
    summary: str
    kind: str = "pe"
    params: tuple[Param, ...] = ()
    d_model: int | Callable[[int, Mapping[str, Any]], int] | None = 64
    heads: int | None = None
    even_d_model: bool = False
    modes: tuple[str, ...] = MODES
    exact: bool = False
    tolerance: tuple[float, float] = (0.0, 0.0)
    tolerance_why: str = "integer/bit output: compared exactly"
    oob: str = "extrapolate"
    position_limit: int | None = None
    learnable: bool = False
    arity: Callable[[SchemeConfig], int] | None = None
    check: Callable[[SchemeConfig], None] | None = None

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind
        assert set(self.modes) <= set(ALL_MODES) and self.modes, self.modes
        assert not self.exact or self.tolerance == (0.0, 0.0), self.id
        assert self.oob in ("wrap", "extrapolate", "clamp", "mixed"), self.oob

    @property
    def default_mode(self) -> str:
        return "compute" if "compute" in self.modes else "table"


@dataclass(frozen=True)
class SchemeConfig:
    """A validated, fully defaulted scheme configuration (JSON-serialisable via ``as_dict``)."""

    scheme: str
    max_len: int
    d_model: int | None
    heads: int | None
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> SchemeSpec:
        return get_spec(self.scheme)

    @property
    def n_bits(self) -> int:
        return n_bits(self.max_len)

    @property
    def arity(self) -> int | None:
        """``k`` for schemes whose positions are ``[N, k]``, else ``None`` (positions ``[N]``)."""
        return self.spec.arity(self) if self.spec.arity else None

    def as_dict(self) -> dict[str, Any]:
        omitted = {p.name for p in self.spec.params
                   if p.omit_default and p.name in self.params
                   and self.params[p.name] == p.default_for(self.max_len)}
        return {
            "scheme": self.scheme,
            "max_len": self.max_len,
            "d_model": self.d_model,
            "heads": self.heads,
            "params": {k: list(v) if isinstance(v, tuple) else v
                       for k, v in self.params.items() if k not in omitted},
        }


_REGISTRY: dict[str, tuple[SchemeSpec, type]] = {}


def register(spec: SchemeSpec) -> Callable[[type], type]:
    """Class decorator: register ``cls`` under ``spec.id``. Registering an id twice is an error."""

    def wrap(cls: type) -> type:
        if spec.id in _REGISTRY:
            raise RuntimeError(f"scheme id {spec.id!r} registered twice")
        cls.spec = spec
        _REGISTRY[spec.id] = (spec, cls)
        return cls

    return wrap


def scheme_ids() -> list[str]:
    """Every registered id, in catalogue order."""
    return list(_REGISTRY)


def get_spec(scheme_id: str) -> SchemeSpec:
    return _lookup(scheme_id)[0]


def get_class(scheme_id: str) -> type:
    return _lookup(scheme_id)[1]


def _lookup(scheme_id: str) -> tuple[SchemeSpec, type]:
    try:
        return _REGISTRY[scheme_id]
    except KeyError:
        hint = did_you_mean(str(scheme_id), _REGISTRY)
        raise UnknownSchemeError(
            f"Unknown scheme {scheme_id!r}.{hint} Available: {', '.join(_REGISTRY)}"
        ) from None


def _size(name: str, value: Any, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise BadParameterError(f"{name} must be a positive integer, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise BadParameterError(f"{name} must be a positive integer, got {value!r}") from None
    if not 1 <= number <= limit:
        raise BadParameterError(f"{name} must be between 1 and {limit}, got {number}")
    return number


def resolve(
    scheme: str,
    max_len: int,
    d_model: int | None = None,
    heads: int | None = None,
    params: Mapping[str, Any] | None = None,
) -> SchemeConfig:
    """Validate user input against the scheme's spec and fill in every default.

    Raises ``UnknownSchemeError`` or ``BadParameterError`` naming the bad value and what is
    allowed; allocates nothing.
    """
    spec = get_spec(scheme)
    max_len = _size("max_len", max_len, MAX_LEN_LIMIT)
    if spec.position_limit is not None and max_len > spec.position_limit:
        # Past its position limit a float scheme is not defined (positions lose their float32
        # exactness), so neither export nor verify can check it (issue 30): the cap is named.
        raise BadParameterError(
            f"max_len {max_len} is past where scheme '{scheme}' is defined: its cap is "
            f"{spec.position_limit} (the |position| up to which it is exact in float32)")
    given = dict(params or {})
    known = {p.name: p for p in spec.params}
    for key in given:
        if key not in known:
            allowed = ", ".join(known) or "none"
            raise BadParameterError(
                f"Unknown --param {key!r} for scheme '{scheme}'.{did_you_mean(key, known)} "
                f"Allowed: {allowed}"
            )
    values = {
        name: p.parse(scheme, given[name]) if name in given else p.default_for(max_len)
        for name, p in known.items()
    }

    if spec.d_model is None:
        if d_model is not None:
            raise BadParameterError(f"scheme '{scheme}' has no d_model (it outputs a bias)")
        width = None
    elif d_model is None:
        width = spec.d_model(max_len, values) if callable(spec.d_model) else spec.d_model
        if not 1 <= width <= D_MODEL_LIMIT:  # a width derived from params (groups=10**20)
            raise BadParameterError(
                f"scheme '{scheme}' with these parameters is {width} wide; d_model must be "
                f"between 1 and {D_MODEL_LIMIT}"
            )
    else:
        width = _size("d_model", d_model, D_MODEL_LIMIT)
    if width is not None and spec.even_d_model and width % 2:
        raise BadParameterError(
            f"scheme '{scheme}' rotates or pairs dimensions: d_model must be even, got {width}"
        )

    if spec.heads is None:
        if heads is not None:
            raise BadParameterError(f"scheme '{scheme}' has no heads (only bias schemes do)")
        n_heads = None
    else:
        n_heads = spec.heads if heads is None else _size("heads", heads, HEADS_LIMIT)

    config = SchemeConfig(scheme, max_len, width, n_heads, values)
    if spec.check is not None:
        spec.check(config)
    return config


def build(config: SchemeConfig, seed: int = 0, checkpoint: str | None = None,
          checkpoint_key: str | None = None, checkpoint_param: str | None = None):
    """The reference module for ``config``, in eval mode.

    Learnable parameters are initialised from ``seed`` (without touching the global RNG), or
    loaded from ``checkpoint`` (``torch.load(weights_only=True)``, keys and shapes checked;
    ``checkpoint_key``: the prefix of the module's entries in a whole model's state_dict;
    ``checkpoint_param``: the name of the one tensor to load, e.g. ``transformer.wpe.weight``).
    """
    import torch

    cls = get_class(config.scheme)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = cls.from_config(config)
    if checkpoint is not None and checkpoint_param is not None:
        load_param_into(module, checkpoint, checkpoint_param)
    elif checkpoint is not None:
        load_into(module, checkpoint, checkpoint_key)
    return module.eval()
