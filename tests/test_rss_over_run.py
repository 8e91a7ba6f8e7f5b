"""scripts/rss_over_run.py: the resident memory of a command's process tree, window by window."""

import sys

import pytest

from scripts import rss_over_run
from scripts.rss_over_run import Window, windows

# A child that holds ~200 MiB of touched pages for a second, then exits with status 3.
HOLDER = "import time; block = bytearray(200 * 2**20); time.sleep(1.5); raise SystemExit(3)"


def test_readings_group_into_windows_with_their_high_and_low() -> None:
    readings = [(0.0, 10.0), (0.5, 30.0), (1.9, 20.0), (2.0, 50.0), (5.5, 40.0)]
    assert windows(readings, 2.0) == [Window(0.0, 30.0, 10.0), Window(2.0, 50.0, 50.0), Window(4.0, 40.0, 40.0)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_commands_memory_and_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    # The child runs under a shell, so the reading has to sum the tree, not the shell alone.
    status = rss_over_run.main(["window_s=100", "--", "sh", "-c", f'"{sys.executable}" -c "{HOLDER}"; exit $?'])
    assert status == 3
    lines = capsys.readouterr().out.splitlines()
    highest = float(lines[-1].split()[1])
    assert 200 < highest < 400, lines
    assert lines[0].startswith("     0 s  high")


def test_an_unknown_option_is_one_message() -> None:
    with pytest.raises(SystemExit, match=r"unknown option 'window=3': expected window_s=SECONDS before --"):
        rss_over_run.main(["window=3", "--", "true"])


@pytest.mark.parametrize("argv, message", [
    (["window_s=soon", "--", "true"], r"window_s=soon: expected a number of seconds above 0"),
    (["window_s=0", "--", "true"], r"window_s=0: expected a number of seconds above 0"),
    (["--", "no-such-command-here"], r"cannot run 'no-such-command-here': No such file or directory"),
])
def test_a_bad_window_or_command_is_one_message(argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        rss_over_run.main(argv)
