"""Weights and assets on the host before the engine starts: shell commands and their checks (pure).

* **Hub snapshots.** ``hf download`` (or ``huggingface-cli download`` in images with a
  huggingface_hub older than 0.34: whichever the image has) into the host cache, inside the
  plan's image (docker) or on the host (native), with every Hub cache variable pointed at the
  host cache (`specdec.host.layout.hub_env`). Only a download that finished writes a *completion
  record* (``$HF_HOME/.specdec/complete/<key>``: the revision, then every file of the snapshot);
  a snapshot counts as cached only when the record exists, the revision is still the one
  ``refs/main`` names, and every file it lists resolves. A half-finished download has no record
  and is fetched again (``hf download`` resumes). Before the record is written every file is
  checked against the hash the Hub gave for it (`VERIFY`): huggingface_hub names a cached blob
  by the file's ETag (``X-Linked-Etag`` else ``ETag``: the LFS sha256 of a large file, the git
  blob id of a small one; fleet.md §1) and 0.33-2.4 never check the bytes against it (2.4 only
  on ``hf cache verify``), so a mirror's poisoned cache or a changed byte on the way would
  otherwise be served to the engine. A file that does not match is deleted (the next run
  fetches it again) and the download fails.
* **Local directories** (``--local-dir``) for engines that need the draft as a path
  (TensorRT-LLM before PR #10099); same record, keyed ``<key>.local``.
* **tiktoken encodings** for gpt-oss on trtllm-serve: fetched from openaipublic and checked
  against the sha256 openai/harmony v0.0.4 expects (``TIKTOKEN_ENCODINGS_BASE``).

**As the service user.** The cache is the service user's (the engine runs as it, and a docker
engine writes to it). Root never writes into it: each command runs as that user (``runuser
-u``; a download in the image as its uid, ``docker run --user``, no new privileges, no
capabilities), so a link the user planted (say the completion record's temporary name pointing
at root's ``authorized_keys``) redirects nothing but the user's own writes. The HF token file is
root's (0600): root copies it, for the one command, to a file the user owns in a fresh
directory of root's under /run (``mktemp -d``: no name anyone could plant), removed on exit;
only for a repo that needs it (``token``: a gated or unknown one), else the CLI reads no token
at all (``HF_TOKEN_PATH=/dev/null``). The CA files a download trusts (``SSL_CERT_FILE``,
`specdec.plan.sites.CA_VARIABLES`) are mounted read-only into the image.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from specdec.engines.trtllm.facts import TIKTOKEN_FILES, TIKTOKEN_URL
from specdec.host import layout
from specdec.host.layout import hub_env

__all__ = [
    "CONTAINER_HF_TOKEN",
    "as_user",
    "cached_check",
    "download_command",
    "record_path",
    "repo_dir",
    "tiktoken_command",
]

CONTAINER_HF_TOKEN = "/run/secrets/hf_token"
_CA_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")  # specdec.plan.sites.CA_VARIABLES
# Every file listed (``$rec``, from its second line) against the Hub's hash of it, in "$snap":
# the ETag the cache's blob is named by (``$1`` = cache) or a --local-dir's metadata gives
# (huggingface_hub ``_local_folder.py``: commit, etag, time); 64 hex: the LFS sha256, 40: the
# git blob id (sha1 of "blob <size>\0" + the bytes). A mismatch is deleted and fails.
VERIFY = (
    'cd "$snap" && tail -n +2 "$rec" | while IFS= read -r f; do '
    'if [ "$1" = cache ]; then e=$(basename "$(readlink "$f")"); '
    'else e=$(sed -n 2p ".cache/huggingface/download/$f.metadata" 2>/dev/null); fi; '
    'case "$e" in *[!0-9a-f]*|"") h=none ;; *) '
    'if [ ${#e} -eq 64 ]; then h=$(sha256sum < "$f"); '
    'elif [ ${#e} -eq 40 ]; then h=$({ printf "blob %s\\000" "$(wc -c < "$f" | tr -d " ")"; '
    'cat "$f"; } | sha1sum); else h=none; fi ;; esac; '
    'if [ "${h%% *}" != "$e" ]; then echo "specdec: $f does not match the Hub\'s hash '
    '(${e:-none}): deleted, not used" >&2; rm -f "$(readlink -f "$f")" "$f"; exit 1; fi; done'
)
# The CLI the image has: `hf` from huggingface_hub 0.34 (and only it from 1.0), else the older
# `huggingface-cli`; both take `download REPO [--local-dir DIR]` and print the path last.
_DOWNLOAD = ('if command -v hf >/dev/null 2>&1; then cli=hf; else cli=huggingface-cli; fi; '
             'if [ -n "$2" ]; then "$cli" download "$1" --local-dir "$2"; '
             'else "$cli" download "$1"; fi')


def repo_dir(repo: str) -> str:
    """The hub cache directory of a repo: ``$HF_HOME/hub/models--ORG--NAME``."""
    return f"{layout.HF_HOME}/hub/models--{repo.replace('/', '--')}"


def _complete_dir() -> str:
    return f"{layout.HF_HOME}/.specdec/complete"


def record_path(repo: str, local_dir: str | None = None) -> str:
    """The completion record of ``repo`` (or of its ``local_dir`` copy)."""
    return f"{_complete_dir()}/{repo.replace('/', '--')}{'.local' if local_dir else ''}"


def _hub_env_words(endpoint: Sequence[tuple[str, str]] = ()) -> list[str]:
    return [f"{k}={v}" for k, v in (*hub_env(), *endpoint)]


def as_user(user: str | None, script: str, token: bool = False) -> str:
    """``script`` run by ``sh`` as ``user`` (None: as the caller, e.g. a test's own user).
    ``token``: the script finds a copy of the HF token it may read at ``"$tok"``."""
    q = shlex.quote
    if user is None:
        return (f"tok={q(layout.HF_TOKEN_FILE)}; " if token else "") + script
    run = f"runuser -u {q(user)} -- sh -c {q(script)}"
    if not token:
        return run
    return (
        "d=$(mktemp -d /run/specdec-prefetch.XXXXXX) && trap 'rm -rf \"$d\"' EXIT && "
        f"install -m 0400 -o {q(user)} -g root {q(layout.HF_TOKEN_FILE)} \"$d/hf_token\" && "
        f"chmod 0711 \"$d\" && tok=\"$d/hf_token\" {run}"
    )


def _fetch(args: Sequence[str], image: str | None, user: str | None,
           endpoint: Sequence[tuple[str, str]], token: bool, cli_dir: str | None = None) -> str:
    """The CLI's download, in the image or on the host (``cli_dir``: natively, a directory
    searched for the CLI before PATH); the token as a file, or none."""
    q = shlex.quote
    cas = sorted({v for k, v in endpoint if k in _CA_VARIABLES})
    if image:
        env_args = [w for kv in _hub_env_words(endpoint) for w in ("-e", q(kv))]
        who = "$(id -u):$(id -g)" if user is not None else "0:0"
        secret = ["-v", f"\"$tok\":{CONTAINER_HF_TOKEN}:ro",
                  "-e", f"HF_TOKEN_PATH={CONTAINER_HF_TOKEN}"] if token else \
            ["-e", "HF_TOKEN_PATH=/dev/null"]
        return " ".join([
            "docker", "run", "--rm", "--network", "host", "--user", f"\"{who}\"",
            "--security-opt", "no-new-privileges", "--cap-drop", "ALL", "-e", "HOME=/tmp",
            "-v", f"{layout.HF_HOME}:{layout.HF_HOME}", *env_args,
            *(w for ca in cas for w in ("-v", q(f"{ca}:{ca}:ro"))), *secret,
            # The engine images' entrypoint is the server; run a shell that picks the CLI.
            "--entrypoint", "sh", q(image), "-c", q(_DOWNLOAD), "sh", *args,
        ])
    env = " ".join(q(kv) for kv in _hub_env_words(endpoint))
    path = f"PATH={q(cli_dir)}:\"$PATH\" " if cli_dir else ""
    token_path = "HF_TOKEN_PATH=\"$tok\"" if token else "HF_TOKEN_PATH=/dev/null"
    return f"env {env} {path}{token_path} sh -c {q(_DOWNLOAD)} sh " + " ".join(args)


def download_command(repo: str, image: str | None, local_dir: str | None = None,
                     user: str | None = None, endpoint: Sequence[tuple[str, str]] = (),
                     cli_dir: str | None = None, token: bool = True) -> str:
    """Download ``repo`` (into ``local_dir`` when given), check every file against the Hub's
    hash of it, then write its completion record, as ``user`` (see the module doc).
    ``endpoint``: where from (``HF_ENDPOINT`` and what goes with it, `specdec.plan.sites`);
    ``cli_dir``: natively, a directory searched for the CLI before PATH (the engine's own venv,
    `specdec.engines.base.Engine.hub_cli_dir`); ``token``: the repo needs the HF token (it
    reaches the CLI only as a file, ``HF_TOKEN_PATH``, never on a command line)."""
    q = shlex.quote
    args = [q(repo)] + ([q(local_dir)] if local_dir else [])
    fetch = _fetch(args, image, user, endpoint, token, cli_dir)
    if local_dir:
        root = q(local_dir)
        snapshot = f"rev=local; snap={root}"
    else:
        root = q(repo_dir(repo))
        snapshot = f"rev=$(cat {root}/refs/main) && snap={root}/snapshots/$rev"
    record = q(record_path(repo, local_dir))
    where = "local" if local_dir else "cache"
    # List the snapshot (not the Hub's .cache metadata of a --local-dir), refuse dangling
    # links, check every file's hash, then publish the record atomically.
    return as_user(user, (
        f"{fetch} >/dev/null && {snapshot} && [ -d \"$snap\" ] && "
        f"mkdir -p {q(_complete_dir())} && "
        f"{{ printf '%s\\n' \"$rev\"; (cd \"$snap\" && find . -path ./.cache -prune -o "
        f"\\( -type f -o -type l \\) -print | sed 's|^\\./||' | sort); }} > {record}.tmp && "
        f"(cd \"$snap\" && tail -n +2 {record}.tmp | while IFS= read -r f; do "
        f"[ -e \"$f\" ] || exit 1; done) && [ \"$(wc -l < {record}.tmp)\" -gt 1 ] && "
        f"rec=$(readlink -f {record}.tmp) && (set -- {where}; {VERIFY}) && "
        f"mv -f {record}.tmp {record}"
    ), token=token)


def cached_check(repo: str, local_dir: str | None = None, user: str | None = None) -> str:
    """Prints ``yes`` when the completion record says every file of the snapshot is there
    (read as ``user``: no root reads of what the user wrote)."""
    q = shlex.quote
    record = q(record_path(repo, local_dir))
    if local_dir:
        head = f"snap={q(local_dir)}"
    else:
        root = q(repo_dir(repo))
        head = (f"rev=$(head -n 1 {record}) && [ \"$(cat {root}/refs/main 2>/dev/null)\" = "
                f"\"$rev\" ] && snap={root}/snapshots/$rev")
    check = (
        f"if [ -f {record} ] && {head} && [ -d \"$snap\" ] && "
        f"(cd \"$snap\" && tail -n +2 {record} | while IFS= read -r f; do "
        f"[ -e \"$f\" ] || exit 1; done); then echo yes; else echo no; fi"
    )
    if user is None:
        return check
    return f"if id -u {q(user)} >/dev/null 2>&1; then {as_user(user, check)}; else echo no; fi"


def tiktoken_command(name: str, user: str | None = None) -> str:
    """Fetch one tiktoken encoding into TIKTOKEN_ENCODINGS_BASE, checked against its sha256,
    as ``user``."""
    q = shlex.quote
    dest = f"{layout.TIKTOKEN_DIR}/{name}"
    digest = TIKTOKEN_FILES[name]
    return as_user(user, (
        f"mkdir -p {q(layout.TIKTOKEN_DIR)} && curl -fsSL --retry 3 -o {q(dest + '.tmp')} "
        f"{q(TIKTOKEN_URL + name)} && echo {q(digest + '  ' + dest + '.tmp')} | sha256sum -c "
        f"--quiet && mv -f {q(dest + '.tmp')} {q(dest)}"
    ))
