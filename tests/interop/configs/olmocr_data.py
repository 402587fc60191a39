"""olmOCR's two data layouts, made in the test: one-page PDFs with a text layer (written by hand, no library), each
beside a markdown file with YAML front matter (olmOCR's current trainer), or named by OpenAI batch responses
(olmOCR's TrainConfig); and a tiny Qwen2-VL folder to train on them."""

from __future__ import annotations

import json
from pathlib import Path

FRONT_MATTER = (
    "---\nprimary_language: en\nis_rotation_valid: true\nrotation_correction: 0\nis_table: false\n"
    "is_diagram: false\n---\n"
)
WORDS = ("alpha", "beta", "gamma", "delta")


def text_pdf(path: Path, lines: list[str], size: tuple[int, int] = (200, 100)) -> str:
    """A one-page PDF whose text layer holds ``lines`` (Helvetica 10 pt, top to bottom)."""
    width, height = size
    escaped = [line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for line in lines]
    stream = "\n".join(f"BT /F1 10 Tf 10 {height - 20 - 14 * i} Td ({line}) Tj ET" for i, line in enumerate(escaped))
    body = stream.encode("latin-1")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {width} {height}] /Contents 4 0 R "
        "/Resources << /Font << /F1 5 0 R >> >> >>".encode(),
        b"<< /Length %d >>\nstream\n" % len(body) + body + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, content in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + content + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    Path(path).write_bytes(bytes(out))
    return str(path)


def page_text(index: int) -> str:
    """The text of page ``index``: a word and its number."""
    return f"{WORDS[index % len(WORDS)]} {index}"


def pages_folder(folder: Path, pages: int = 8) -> Path:
    """olmOCR's current layout: ``pNN.pdf`` + ``pNN.md`` (front matter, then the page's text), half in a subfolder."""
    for index in range(pages):
        where = folder / ("part" if index % 2 else "")
        where.mkdir(parents=True, exist_ok=True)
        text_pdf(where / f"p{index:02d}.pdf", [page_text(index)])
        (where / f"p{index:02d}.md").write_text(FRONT_MATTER + page_text(index) + "\n")
    return folder


def reply_json(text: str) -> str:
    """The structured reply olmOCR asked OpenAI for: the page's fields and its natural text, as JSON."""
    return json.dumps(
        {
            "primary_language": "en",
            "is_rotation_valid": True,
            "rotation_correction": 0,
            "is_table": False,
            "is_diagram": False,
            "natural_text": text,
        }
    )


def batch_response(custom_id: str, content: str, finish_reason: str = "stop") -> dict:
    """One line of an OpenAI batch API output file."""
    return {
        "id": f"batch_req_{abs(hash(custom_id)) % 10**8}",
        "custom_id": custom_id,
        "response": {
            "status_code": 200,
            "body": {
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}
                ]
            },
        },
    }


def batch_folder(folder: Path, pages: int = 8, unfinished: int = 0) -> Path:
    """olmOCR's TrainConfig layout: ``pdfs/dNN.pdf`` and ``done/responses.json`` (JSON Lines) naming each page as
    ``PATH-1``; ``unfinished`` more responses stopped at the length limit (left out, as olmOCR leaves them out)."""
    (folder / "pdfs").mkdir(parents=True, exist_ok=True)
    (folder / "done").mkdir(parents=True, exist_ok=True)
    lines = []
    for index in range(pages + unfinished):
        pdf = text_pdf(folder / "pdfs" / f"d{index:02d}.pdf", [page_text(index)])
        finish = "stop" if index < pages else "length"
        lines.append(batch_response(f"{pdf}-1", reply_json(page_text(index)), finish))
    (folder / "done" / "responses.json").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return folder


def tiny_qwen2_vl(folder: Path) -> str:
    """A tiny Qwen2-VL (random weights, seeded) with its processor, saved to ``folder``."""
    import torch
    from transformers import AutoModelForImageTextToText

    from honing.models.tiny_vl import build_tiny_processor, tiny_vl_config

    path = build_tiny_processor("qwen2_vl", str(folder))
    torch.manual_seed(0)
    AutoModelForImageTextToText.from_config(tiny_vl_config("qwen2_vl")).save_pretrained(path)
    return str(path)
