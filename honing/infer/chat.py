"""``honing chat MODEL_OR_RUN``: a conversation in the terminal, each reply streamed as it is decoded; the whole
conversation goes back to the model every turn. ``/reset`` starts over, ``/exit`` (or Ctrl-D) ends."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from honing.errors import ConfigError
from honing.infer.generate import TextGenerator, answer_with_images, vision_turn, within_context
from honing.infer.generate_command import load_images, sampling_from
from honing.infer.model_source import load_model

PROMPT = ">>> "
HELP = "/reset starts a new conversation, /exit (or Ctrl-D) ends"


def run_chat(args: argparse.Namespace, stdin: TextIO | None = None, out: TextIO | None = None) -> int:
    """Carry out ``honing chat``; returns the exit code."""
    stdin, out = stdin or sys.stdin, out or sys.stdout
    sampling = sampling_from(args)
    loaded = load_model(args.model, device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code)
    sampling = within_context(sampling, loaded, explicit=args.max_new_tokens is not None)
    if args.chat_template is False or not getattr(loaded.tokenizer, "chat_template", None):
        raise ConfigError(
            f"chat: {loaded.source.path} has no chat template to render a conversation with; "
            "`honing generate --no-chat-template` continues raw text"
        )
    if args.image and not loaded.is_vision:
        raise ConfigError(f"--image: {loaded.source.path} is a text model; images need a vision-language model")
    images = load_images(args.image, args.pdf_page) if loaded.is_vision else []
    generator = None if loaded.is_vision else TextGenerator(loaded, sampling, chat_template=True)
    start = [{"role": "system", "content": args.system}] if args.system else []
    history = list(start)

    def write(text: str) -> None:
        out.write(text)
        out.flush()

    write(f"chatting with {loaded.source.path}: {HELP}\n")
    while True:
        line = _read_line(stdin, out)
        if line is None or line.strip() == "/exit":
            break
        text = line.strip()
        if not text:
            continue
        if text == "/reset":
            history = list(start)
            write("(a new conversation)\n")
            continue
        if text.startswith("/"):
            write(f"unknown command {text.split()[0]}: {HELP}\n")
            continue
        first = not any(turn["role"] == "user" for turn in history)
        history.append({"role": "user", "content": text} if generator else vision_turn(text, len(images) * first))
        try:
            if generator is not None:
                reply = generator.stream(history, write)
            else:  # images belong to the conversation's first user turn
                reply = answer_with_images(loaded, history, images, sampling, write=write)
        except KeyboardInterrupt:  # Ctrl-C stops this reply; the turn is forgotten and the conversation goes on
            history.pop()
            write("\n(interrupted)\n")
            continue
        write("\n")
        history.append({"role": "assistant", "content": reply})
    return 0


def _read_line(stdin: TextIO, out: TextIO) -> str | None:
    """The next line typed (without its newline), or None at end of input; ``input()`` on a terminal gives line
    editing and history."""
    if stdin is sys.stdin and stdin.isatty() and out is sys.stdout and _has_readline():
        try:
            return input(PROMPT)
        except EOFError:
            out.write("\n")
            return None
        except KeyboardInterrupt:  # Ctrl-C at the prompt drops the line, as in a shell
            out.write("\n")
            return ""
    out.write(PROMPT)
    out.flush()
    line = stdin.readline()
    return line.rstrip("\n") if line else None


def _has_readline() -> bool:
    """Whether ``input()`` edits lines with readline (without it, ``input`` writes its prompt to stderr)."""
    try:
        import readline  # noqa: F401
    except ImportError:
        return False
    return True
