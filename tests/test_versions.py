import pytest

from dsx.versions import Version, VersionError, installed_deepspeed, resolve_target


def test_local_suffix_is_dropped():
    assert Version("0.19.8+cu130") == Version("0.19.8")


def test_short_versions_are_padded():
    assert Version("0.19") == Version("0.19.0")


def test_0_18_is_legacy_and_0_19_is_not():
    assert Version("0.18.9").is_legacy and not Version("0.19.0").is_legacy


def test_default_target_is_the_installed_deepspeed():
    assert resolve_target(None) == Version(installed_deepspeed())


def test_explicit_target_wins():
    assert resolve_target("0.18.9") == Version("0.18.9")


def test_unknown_series_is_refused_with_the_known_versions():
    with pytest.raises(VersionError, match=r"dsx knows the DeepSpeed 0.18 and 0.19 config surface \(checked against "
                                           r"0.18.9, 0.19.8\); 0.14.0 is outside it"):
        resolve_target("0.14")


def test_garbage_is_not_a_version():
    with pytest.raises(VersionError, match="'latest' is not a DeepSpeed version"):
        Version("latest")
