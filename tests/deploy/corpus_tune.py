"""The bad-input corpus, part 3 (issue 17): tune cache entries, read back from a file anyone
with access to the cache could have written, so checked as host data is."""

from __future__ import annotations

import json
from typing import Any

AUTO = {"specdec_device": "agx-orin-64gb", "specdec_model": "meta-llama/Llama-3.1-8B-Instruct"}


def _entry(plan: Any, **over: Any) -> dict[str, Any]:
    """A good entry for ``plan`` (what the tune phase stores), with ``over`` in its config."""
    from specdec.tune.cache import cache_key

    cfg = {"method": "eagle3", "draft": plan.draft, "k": 4, "k_by_batch": [], **over}
    return {"key": cache_key(plan), "result": {"config": cfg, "curves": [], "measured": [],
                                              "objective": "c=1 throughput", "bench_seconds": 9.5},
            "meta": {"host": "x"}}


def _doc(**top: Any) -> Any:
    return lambda plan: {**_entry(plan), **top}


def _result(**res: Any) -> Any:
    return lambda plan: {**_entry(plan), "result": {**_entry(plan)["result"], **res}}


def _cfg(**over: Any) -> Any:
    return lambda plan: _entry(plan, **over)


NOT_COMPARED = "is not one of the methods this plan compares"
# name -> (the entry: a function of the plan giving a document, or raw bytes; the reason shown)
TUNE_CASES: dict[str, tuple[Any, str]] = {
    "swapped-head": (_cfg(draft="attacker/evil-eagle3"), NOT_COMPARED),
    "other-head": (_cfg(draft="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B-x"), NOT_COMPARED),
    "method-suffix": (_cfg(method="suffix", draft=None), NOT_COMPARED),
    "method-injection": (_cfg(method="ngram; id"), "not a speculative method of the catalog"),
    "method-none": (_cfg(method="none", draft=None), "not a speculative method of the catalog"),
    "method-case": (_cfg(method="EAGLE3"), "not a speculative method of the catalog"),
    "method-int": (_cfg(method=5), "not a speculative method of the catalog"),
    "k-negative": (_cfg(k=-5), "result.config.k=-5: must be an integer in 1..8"),
    "k-zero": (_cfg(k=0), "result.config.k=0: must be an integer in 1..8"),
    "k-huge": (_cfg(k=10**9), "result.config.k=1000000000: must be an integer in 1..8"),
    "k-nine": (_cfg(k=9), "result.config.k=9: must be an integer in 1..8"),
    "k-string": (_cfg(k="4"), "result.config.k='4': must be an integer in 1..8"),
    "k-float": (_cfg(k=4.5), "result.config.k=4.5: must be an integer in 1..8"),
    "k-bool": (_cfg(k=True), "result.config.k=True: must be an integer in 1..8"),
    "draft-dict": (_cfg(draft={"repo": "x/y"}), "result.config.draft={'repo': 'x/y'}: must be"),
    "draft-list": (_cfg(draft=["x/y"]), "result.config.draft=['x/y']: must be a string"),
    "draft-flag": (_cfg(draft="--trust-remote-code"), "not a Hugging Face repo id"),
    "draft-path": (_cfg(draft="../../etc/passwd"), "not a Hugging Face repo id"),
    "draft-newline": (_cfg(draft="x/y\nz"), "contains a line break or control character"),
    "draft-token": (_cfg(draft="hf_" + "Q" * 30), "holds a token-shaped string"),
    "sched-string": (_cfg(k_by_batch="1-2:3"), "not a list of [start, end, k] ranges"),
    "sched-start": (_cfg(k_by_batch=[[2, 4, 3]]), "k_by_batch[0][0]=2: must be an integer in 1..1"),
    "sched-k": (_cfg(k_by_batch=[[1, 2, 99]]), "k_by_batch[0][2]=99: must be an integer in 0..8"),
    "sched-pair": (_cfg(k_by_batch=[[1, 2]]), "k_by_batch[0]: not [start, end, k]"),
    "sched-gap": (_cfg(k_by_batch=[[1, 2, 3], [5, 8, 3]]), "k_by_batch[1][0]=5"),
    "sched-release": (_cfg(k_by_batch=[[1, 2, 3], [3, 16, 2]]),
                      "a per-batch-size schedule this release or max_num_seqs cannot take"),
    "key-other-model": (lambda plan: {**_entry(plan), "key": {**_entry(plan)["key"],
                                                              "model": "Qwen/Qwen3-8B"}},
                        "its key is not this plan's"),
    "nan-seconds": (lambda plan: json.dumps(_entry(plan)).replace("9.5", "NaN").encode(),
                    "NaN is not a finite number"),
    "inf-seconds": (lambda plan: json.dumps(_entry(plan)).replace("9.5", "-Infinity").encode(),
                    "-Infinity is not a finite number"),
    "negative-seconds": (_result(bench_seconds=-1), "result.bench_seconds=-1: not a duration"),
    "not-json": (b"{'key': 1}", "not valid JSON"),
    "truncated": (lambda plan: json.dumps(_entry(plan)).encode()[:40], "not valid JSON"),
    "empty": (b"", "not valid JSON"),
    "a-list": (b"[1, 2]", "not a tune cache entry (key, result, meta)"),
    "extra-field": (_doc(exec="rm -rf /"), "not a tune cache entry (key, result, meta)"),
    "curves-string": (_result(curves="x"), "result.curves: not a list"),
    "objective-int": (_result(objective=5), "result.objective or meta: wrong type"),
    "meta-list": (_doc(meta=[1]), "result.objective or meta: wrong type"),
    "objective-escape": (_result(objective="\x1b[2Jowned"), "control character (U+001B)"),
    "objective-long": (_result(objective="x" * 5000), "a string of 5000 characters"),
    "deep": (_result(curves=json.loads("[" * 20 + "]" * 20)), "nested deeper than 12"),
    "huge": (lambda plan: b" " * (2**20 + 1), "not a regular file of at most 1 MiB"),
    "symlink": ("symlink", "not a regular file of at most 1 MiB"),
}
