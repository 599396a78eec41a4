"""live/keys.py: key presses read from a terminal without waiting, and the terminal given back as it was;
and watch's live screen switching its findings whole on the key f."""

from __future__ import annotations

import io
import os
import termios
import time

from rich.console import Console

from nccl_logsift.cli.watch import LiveScreen
from nccl_logsift.live import EventKind, LiveEvent
from nccl_logsift.live.keys import Keys


def terminal() -> tuple[int, str]:
    """A pseudo-terminal: the end a user types into, and the path of the end watch reads."""
    typed, read = os.openpty()
    return typed, os.ttyname(read)


def read_soon(keys: Keys) -> str:
    for _ in range(50):
        if got := keys.pressed():
            return got
        time.sleep(0.01)
    return ""


def test_keys_arrive_as_pressed_and_the_terminal_is_given_back_as_it_was():
    typed, path = terminal()
    fd = os.open(path, os.O_RDONLY)
    before = termios.tcgetattr(fd)
    with Keys(path) as keys:
        assert keys.available and keys.pressed() == ""  # nothing typed: no wait, no key
        during = termios.tcgetattr(fd)
        assert not during[3] & termios.ICANON and not during[3] & termios.ECHO  # one key at a time, unechoed
        assert during[3] & termios.ISIG  # Ctrl-C still interrupts
        os.write(typed, b"f")  # no Enter: cbreak hands it over at once
        assert read_soon(keys) == "f"
    assert termios.tcgetattr(fd) == before
    os.close(fd)


def test_without_a_terminal_there_are_no_keys(tmp_path):
    plain = tmp_path / "not-a-terminal"
    plain.write_text("f")
    for path in (str(plain), str(tmp_path / "absent")):
        with Keys(path) as keys:
            assert not keys.available and keys.pressed() == ""


def test_the_key_f_switches_the_live_findings_whole_and_back():
    from render.test_live_view import LONG, flat, render, snapshot

    class State:
        def snapshot(self):
            return snapshot(events=(LiveEvent(EventKind.FINDING, 20.5, LONG),))

    typed, path = terminal()
    console = Console(file=io.StringIO(), width=80, height=40, color_system=None)
    screen = LiveScreen(console, keys=Keys(path))
    with screen:
        assert "[f: findings whole]" in render(screen.view(State()), width=80)
        os.write(typed, b"f")
        for _ in range(50):
            screen.show(State(), [], redraw=False)
            if screen.full:
                break
            time.sleep(0.01)
        shown = render(screen.view(State()), width=80)
        assert screen.full and flat(LONG.advice) in flat(shown) and "[f: findings on one line]" in shown
        os.write(typed, b"F")
        for _ in range(50):
            screen.show(State(), [], redraw=False)
            if not screen.full:
                break
            time.sleep(0.01)
        assert not screen.full
