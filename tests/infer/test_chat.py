"""``honing chat`` in a real pseudo-terminal: the conversation is kept between turns, ``/reset`` forgets it,
``/exit`` ends; every reply is transformers' greedy answer to the whole conversation so far."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest

from tests.infer.reference import transformers_greedy

pytestmark = pytest.mark.slow

HONING = os.path.join(os.path.dirname(sys.executable), "honing")
PROMPT = b">>> "
# readline's bracketed-paste switches, written around each prompt on some terminals
ESCAPES = re.compile(rb"\x1b\[\?2004[hl]")


class Terminal:
    """A process on the slave side of a pty; what it writes is read from the master side."""

    def __init__(self, command: list[str]):
        self.master, slave = pty.openpty()
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TERM": "dumb"}
        self.process = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=subprocess.PIPE, env=env)
        os.close(slave)
        self.buffer = b""

    def read_until(self, marker: bytes, timeout: float = 120) -> bytes:
        """Everything up to and including the next ``marker``."""
        deadline = time.monotonic() + timeout
        while marker not in self.buffer:
            assert self.process.poll() is None or select.select([self.master], [], [], 0)[0], self.failure()
            ready, _, _ = select.select([self.master], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"no {marker!r} within {timeout} s; got {self.buffer!r}"
            try:
                self.buffer += os.read(self.master, 4096)
            except OSError:  # the process closed the terminal
                break
        head, _, self.buffer = self.buffer.partition(marker)
        return ESCAPES.sub(b"", head)

    def send(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def failure(self) -> str:
        return f"honing chat exited with {self.process.returncode}: {self.process.stderr.read().decode()}"


def reply_of(chunk: bytes, typed: str) -> str:
    """The reply in what the terminal showed after a line was typed: its echo, then the reply and a newline
    (the terminal writes every newline as CR LF)."""
    echo = typed.encode() + b"\r\n"
    assert chunk.startswith(echo), chunk
    assert chunk.endswith(b"\r\n"), chunk
    return chunk[len(echo) : -2].replace(b"\r\n", b"\n").decode("utf-8")


def test_chat_keeps_the_conversation_until_reset(sft_run):
    first, second = "Reverse the letters: abcde", "and now: xyz"
    reply_1, reply_2 = (None, None)
    terminal = Terminal([HONING, "chat", str(sft_run), "--max-new-tokens", "12"])
    try:
        banner = terminal.read_until(PROMPT)
        assert b"/reset" in banner and b"/exit" in banner
        terminal.send(first)
        reply_1 = reply_of(terminal.read_until(PROMPT), first)
        terminal.send(second)
        reply_2 = reply_of(terminal.read_until(PROMPT), second)
        terminal.send("/reset")
        assert terminal.read_until(PROMPT) == b"/reset\r\n(a new conversation)\r\n"
        terminal.send(second)
        reply_3 = reply_of(terminal.read_until(PROMPT), second)
        terminal.send("/exit")
        assert terminal.process.wait(timeout=60) == 0, terminal.failure()
    finally:
        if terminal.process.poll() is None:
            terminal.process.kill()
        os.close(terminal.master)
    expected = transformers_greedy(
        sft_run / "hf",
        [
            [{"role": "user", "content": first}],
            [
                {"role": "user", "content": first},
                {"role": "assistant", "content": reply_1},
                {"role": "user", "content": second},
            ],
            [{"role": "user", "content": second}],
        ],
        12,
        chat=True,
    )
    assert [reply_1, reply_2, reply_3] == expected
    assert expected[1] != expected[2]  # the kept conversation changed the answer: /reset really forgot it
