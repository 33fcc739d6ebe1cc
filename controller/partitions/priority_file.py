"""Reading a learned priority function from its file (written by ``tiresias learn``).

The parsing itself is the core's (``controller.core.expr``); this module only reads
the bytes, so that the core stays free of I/O."""
from __future__ import annotations

import os
from typing import Union

from controller.core.expr import Node, parse_expression_document
from controller.core.model import InputError

__all__ = ["load_expression_file", "read_expression_text"]

MAX_FILE_CHARS = 1 << 16  # one expression and its comments; the expression itself is capped lower


def load_expression_file(path: Union[str, os.PathLike]) -> Node:
    """The expression stored in ``path``; errors are ``file:line: ...`` InputErrors."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read(MAX_FILE_CHARS + 1)
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read the priority file ({err.__class__.__name__}: "
                         f"{getattr(err, 'strerror', None) or err})") from None
    if len(text) > MAX_FILE_CHARS:
        raise InputError(f"{path}: longer than {MAX_FILE_CHARS} characters, not a priority file")
    return parse_expression_document(text, str(path))


def read_expression_text(path: Union[str, os.PathLike, None]) -> str | None:
    """The file's expression as canonical text (what EngineConfig carries), or None."""
    return load_expression_file(path).to_text() if path else None
