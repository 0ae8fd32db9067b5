"""Values in rendered nginx configuration: every one quoted, and refused when quoting could not
keep it one token (pure).

nginx's configuration parser (ngx_conf_file.c ``ngx_conf_read_token``) ends a token at
whitespace, ``;``, ``{`` or ``}``; inside ``"…"`` only ``\\`` escapes and ``$`` still starts a
variable (ngx_http_script.c compiles every ``$name`` of a quoted argument). So a value that is
to stay one literal argument must hold none of ``"``, ``'``, ``\\``, ``$``, ``;``, ``{``, ``}``,
whitespace or a control character. Host data is checked long before (`specdec.config.hygiene`):
this is the last line of defence, where the text is written.
"""

from __future__ import annotations

import re

from specdec.config.hygiene import show
from specdec.errors import RenderError

__all__ = ["quote"]

_SAFE = re.compile(r"[!#%&()*+,./0-9:=?@A-Z\[\]^_`a-z|~-]+", re.ASCII)


def quote(value: object) -> str:
    """``value`` as one double-quoted nginx argument (`RenderError` if it cannot be one)."""
    text = str(value)
    if not _SAFE.fullmatch(text):
        raise RenderError(f"refusing to write {show(text)} into an nginx configuration: only "
                          "letters, digits and URL punctuation (no quotes, '$', ';', braces, "
                          "backslash or whitespace)")
    return f'"{text}"'
