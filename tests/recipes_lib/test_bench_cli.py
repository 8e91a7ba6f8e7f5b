"""`python -m local_tinker.bench` reads `key=value` like every other command (the bench itself is not run)."""

import chz
import pytest

from local_tinker.bench import BenchConfig
from recipes_lib.argv import config_from_argv


def test_keys_and_defaults() -> None:
    assert config_from_argv(chz.Blueprint(BenchConfig), []) == BenchConfig()
    config = config_from_argv(chz.Blueprint(BenchConfig), ["precisions=float32", "server=True", "repeats=2"])
    assert (config.precisions, config.server, config.repeats, config.json_path) == (("float32",), True, 2, None)


@pytest.mark.parametrize(("arg", "message"), [("repeats=0", "repeats must be >= 1"), ("precisions=fp8", "fp8")])
def test_bad_arguments_exit_with_the_reason(arg: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        config_from_argv(chz.Blueprint(BenchConfig), [arg])
    assert info.value.code == 2 and message in capsys.readouterr().err
