"""The shared argument checks (mfd_theory.validation): what passes, and the one-line message of what fails."""

from __future__ import annotations

import numpy as np
import pytest

from mfd_theory.validation import (check_choice, check_device, check_figure_file, check_int, check_out_dir, check_out_file,
                                   check_real, is_real, make_out_dir)


@pytest.mark.parametrize("x, ok", [(3, True), (np.int64(3), True), (2.5, True), (np.float32(1), True), (10 ** 30, True),
                                   (True, False), (np.bool_(True), False), (float("nan"), False),
                                   (float("inf"), False), ("3", False), (None, False), (1 + 2j, False)])
def test_is_real(x, ok):
    assert is_real(x) is ok


def test_check_int_bounds_types_and_messages():
    assert check_int("n", np.int32(5), 1) == 5
    assert check_int("n", 64.0, 1, integral_floats=True) == 64
    for bad in (0, 11, 2.0, 2.5, True, "3", None, float("nan")):
        with pytest.raises(ValueError, match=r"^n: must be an integer in \[1, 10\], got "):
            check_int("n", bad, 1, 10)
    with pytest.raises(ValueError, match=r"^seed: must be an integer >= 0, got -1$"):
        check_int("seed", -1, 0)
    with pytest.raises(ValueError, match=r"^k: must be an integer, got 'x'$"):
        check_int("k", "x")


def test_check_real_open_and_closed_bounds():
    assert check_real("t", 0, 0) == 0.0
    with pytest.raises(ValueError, match=r"^top_p: must be a finite number in \(0, 1\], got 0$"):
        check_real("top_p", 0, 0, 1, low_open=True)
    assert check_real("top_p", 1, 0, 1, low_open=True) == 1.0
    for bad in (float("inf"), float("nan"), True, "1"):
        with pytest.raises(ValueError, match="^x: must be a finite number"):
            check_real("x", bad)


def test_check_choice():
    assert check_choice("policy", "off", ("off", "global")) == "off"
    with pytest.raises(ValueError, match="^policy: must be one of off, global; got 'on'$"):
        check_choice("policy", "on", ("off", "global"))
    with pytest.raises(ValueError, match="^policy"):
        check_choice("policy", ["off"], ("off", "global"))


def test_output_paths_are_checked_without_creating_anything(tmp_path):
    target = tmp_path / "a" / "b"
    assert check_out_dir(target) == target and not (tmp_path / "a").exists()
    afile = tmp_path / "f.txt"
    afile.write_text("x")
    with pytest.raises(ValueError, match="^--out: .* exists and is not a directory$"):
        check_out_dir(afile)
    with pytest.raises(ValueError, match="^--out: needs a directory$"):
        check_out_dir("")
    with pytest.raises(ValueError, match="^--figure: x.txt must end in .png, .pdf, .svg"):
        check_figure_file(tmp_path / "x.txt")
    with pytest.raises(ValueError, match="^--file: .* is a directory, expected a file path$"):
        check_out_file(tmp_path, "--file")
    assert list(tmp_path.iterdir()) == [afile]  # the checks left nothing behind
    made = make_out_dir(target)
    assert made.is_dir() and list(made.iterdir()) == []


def test_check_device():
    for ok in ("cpu", "cuda", "cuda:0", "cuda:12"):
        assert check_device("--device", ok) == ok
    assert check_device("--device", "auto", auto=True) == "auto"
    for bad in ("auto", "gpu", "cuda:", "cuda:x", "cudax", "", None, 0):
        with pytest.raises(ValueError, match=r"^--device: must be cpu, cuda or cuda:N, got "):
            check_device("--device", bad)


def test_token_ids_is_the_one_rule_for_token_arrays():
    """Integers pass, whole finite floats become integers, and everything else is refused naming the
    argument: the one rule that the futures, the chimera counts and the fitted samples all apply."""
    import numpy as np

    from mfd_theory.chimeras import splices
    from mfd_theory.distributions import MixtureOfProducts
    from mfd_theory.fit import fit_mixture
    from mfd_theory.validation import token_ids

    assert token_ids("x", [[1, 2], [3, 4]]).dtype == np.int64
    np.testing.assert_array_equal(token_ids("x", np.array([1.0, 2.0])), [1, 2])
    assert token_ids("x", []).shape == (0,)
    for bad in ([1.5, 2.0], [np.inf, 1.0], [np.nan], ["a"], np.array([1, None], dtype=object), [True, False]):
        with pytest.raises(ValueError, match=r"^x: expected integer token ids, got dtype"):
            token_ids("x", bad)
    # every caller: an infinite "token" is refused, never cast to a garbage id
    for call, name in ((lambda: MixtureOfProducts.futures([[0.0, np.inf]], vocab_size=4), "sequences"),
                       (lambda: splices([0, 1], [1.0, np.inf]), "b"),
                       (lambda: fit_mixture(np.array([[0.0, np.inf]]), 1, 4), "samples")):
        with pytest.raises(ValueError, match="expected integer token ids"):
            call()
