"""core.dtypes: how a dtype is classified (bfloat16 among the floats, though numpy's kind for it
is 'V'), the identities of max and min, and the bitwise comparison of replicas (issue 23)."""

from __future__ import annotations

import numpy as np
import pytest

from spmdrules.core.dtypes import extremes, is_bfloat16, is_float, is_inexact, same_values
from spmdrules.core.errors import SpmdError

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)


def test_bfloat16_is_a_float_and_only_it_among_the_extension_dtypes() -> None:
    assert BF16.kind == "V" and is_bfloat16(BF16) and is_float(BF16) and is_inexact(BF16)
    assert not is_bfloat16(np.dtype(ml_dtypes.float8_e4m3fn))
    assert not is_bfloat16(np.dtype("V2"))  # a raw 2-byte void is not a float
    floats = ["float16", "float32", "float64"]
    assert all(is_float(np.dtype(d)) for d in floats)
    assert all(is_inexact(np.dtype(d)) and not is_float(np.dtype(d))
               for d in ("complex64", "complex128"))
    assert not any(is_inexact(np.dtype(d)) for d in ("bool", "int8", "uint8", "int64"))


def test_the_identities_of_max_and_min_per_dtype() -> None:
    assert extremes(BF16) == (-np.inf, np.inf)
    assert extremes(np.dtype(np.float16)) == (-np.inf, np.inf)
    assert extremes(np.dtype(np.int8)) == (-128, 127)
    assert extremes(np.dtype(np.uint16)) == (0, 65535)
    assert extremes(np.dtype(bool)) == (False, True)
    with pytest.raises(SpmdError, match="complex128 has no order"):
        extremes(np.dtype(np.complex128))


@pytest.mark.parametrize("dtype", [BF16, np.dtype("float16"), np.dtype("float64"),
                                   np.dtype("complex64")])
def test_same_values_compares_bits_with_any_nan_matching_any_nan(dtype: np.dtype) -> None:
    a = np.array([1.0, np.nan, 0.0, -2.5]).astype(dtype)
    assert same_values(a, a.copy())
    assert same_values(a[::2], a.copy()[::2])  # strided
    assert same_values(np.array(np.nan).astype(dtype), np.array(np.nan).astype(dtype))  # 0-d
    signed = a.copy()
    signed[2] = -0.0
    assert not same_values(a, signed)
    other = a.copy()
    other[1] = 3.0
    assert not same_values(a, other)
    assert not same_values(a, a[:3])


def test_same_values_matches_nans_of_any_payload_and_complex_nans() -> None:
    bits = np.array([0x7FC00000, 0x7FC00001, 0xFFC00000], dtype=np.uint32)
    nans = bits.view(np.float32)
    assert np.isnan(nans).all()
    assert same_values(nans, nans[::-1].copy())
    assert same_values(np.array([complex(np.nan, 1.0)]), np.array([complex(2.0, np.nan)]))
    assert not same_values(np.array([1 + 2j]), np.array([1 - 2j]))
    assert same_values(np.array([1, 2]), np.array([1, 2], dtype=np.int32))  # as a's dtype
