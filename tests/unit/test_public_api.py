"""The public API: what mgpu_tui.__all__ names keeps working; the reporter's first documented path
still imports, with a warning that names the new one."""

import importlib
import sys
import warnings

import mgpu_tui


def test_the_reporter_is_imported_from_the_package():
    from mgpu_tui import Reporter
    from mgpu_tui.engine.rank.reporter import Reporter as Inside

    assert Reporter is Inside
    assert set(mgpu_tui.__all__) == {"Reporter", "__version__"}
    assert mgpu_tui.__version__.count(".") >= 2


def test_the_first_docs_path_still_imports_with_a_deprecation_warning():
    sys.modules.pop("mgpu_tui.engine.reporter", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = importlib.import_module("mgpu_tui.engine.reporter")
    assert old.Reporter is mgpu_tui.Reporter
    (warning,) = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert "from mgpu_tui import Reporter" in str(warning.message)


def test_an_unknown_name_is_an_attribute_error():
    try:
        mgpu_tui.Nothing  # noqa: B018
    except AttributeError as exc:
        assert "Nothing" in str(exc)
    else:
        raise AssertionError("mgpu_tui.Nothing imported")
