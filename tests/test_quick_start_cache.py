"""The tests reuse the DeepSpeed ops the README's quick start built: one op folder per Python environment."""

from __future__ import annotations

import os

import pytest

from conftest import USER_SET_OP_FOLDER
from dsx.op_cache import environment_dir


@pytest.mark.skipif(USER_SET_OP_FOLDER, reason="TORCH_EXTENSIONS_DIR set by the user: both use that")
def test_the_tests_build_ops_in_the_folder_dsx_run_uses_in_this_environment():
    quick_start_env = {k: v for k, v in os.environ.items() if k != "TORCH_EXTENSIONS_DIR"}
    # dsx.launcher gives the ranks environment_dir(env) when TORCH_EXTENSIONS_DIR is unset, as in the quick start
    assert os.environ["TORCH_EXTENSIONS_DIR"] == str(environment_dir(quick_start_env))
