"""Plant known decoding bugs in a scratch copy of the project and show the conformance suite catches each one.

    python tests/mutations.py            # every mutation (a few minutes on 2 cores)
    python tests/mutations.py rope_shift # only the named ones

The project (``sam3_agent/`` with its prompts and photos, ``tests/``) is copied to a temporary folder; first the
unchanged copy must pass ``tests/test_engine_conformance.py``, then each mutation is applied alone (one exact
text replacement in one file) and the suite must fail. Prints one line per mutation and exits 0 only when the
clean copy passes and every mutation is caught. Uses ``$SAM3_AGENT_CACHE`` like the tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = "tests/test_engine_conformance.py"
COPIED = ("sam3_agent", "tests")  # the prompts and photos ship inside sam3_agent/


@dataclass(frozen=True)
class Mutation:
    """One planted bug: ``old`` (found exactly once in ``path``) becomes ``new``."""

    name: str
    what: str
    path: str
    old: str
    new: str


MUTATIONS = (
    Mutation(
        "rope_shift",
        "every generated token's rotary position shifted by one",
        "sam3_agent/engine/qwen_decode.py",
        "[n + r.delta for n, r in zip(next_index, requests)]",
        "[n + r.delta + 1 for n, r in zip(next_index, requests)]",
    ),
    Mutation(
        "padding_visible",
        "each row of a padded batch attends to the padding laid between the shared prefix and its own tokens",
        "sam3_agent/engine/row_caches.py",
        "mask[i, start + width - length :] = 1",
        "mask[i, start:] = 1",
    ),
    Mutation(
        "image_digest_ignored",
        "prefix matching compares image token positions but not image contents",
        "sam3_agent/engine/kv_prefix.py",
        "if span_a != span_b or span_a.end > length:",
        "if (span_a.start, span_a.end) != (span_b.start, span_b.end) or span_a.end > length:",
    ),
    Mutation(
        "shared_sampler",
        "every row of a sampled batch draws from the first row's generator",
        "sam3_agent/engine/qwen_decode.py",
        "token = choosers[i].choose(logits[i : i + 1])",
        "token = choosers[0].choose(logits[i : i + 1])",
    ),
    Mutation(
        "penalty_without_prompt",
        "the repetition penalty counts only generated tokens, not the prompt's",
        "sam3_agent/engine/qwen_decode.py",
        "histories = [r.tokens.ids.tolist() for r in requests] if self._penalty is not None else []",
        "histories = [[] for r in requests] if self._penalty is not None else []",
    ),
    Mutation(
        "recurrent_state_shared",
        "in a hybrid model's batch every row decodes from the first row's linear-attention (recurrent) state",
        "sam3_agent/engine/row_caches.py",
        "torch.cat([s.recurrent for s in layer])",
        "torch.cat([layer[0].recurrent for s in layer])",
    ),
)


def copy_project(target: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for name in COPIED:
        shutil.copytree(ROOT / name, target / name, ignore=ignore)


def run_suite(folder: Path, stop_at_first: bool) -> tuple[bool, str, float]:
    """(passed, first failing test or "", seconds) of the conformance suite in ``folder``."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", SUITE]
    if stop_at_first:
        command.insert(4, "-x")
    started = time.perf_counter()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, env=dict(os.environ))
    failed = [line.split(" ", 1)[1].split(" - ")[0] for line in done.stdout.splitlines() if line.startswith("FAILED ")]
    return done.returncode == 0, (failed[0] if failed else ""), time.perf_counter() - started


def apply(folder: Path, mutation: Mutation) -> None:
    """Apply ``mutation`` in ``folder``.

    Raises:
        ValueError: its text is not found exactly once (the code moved on: update the mutation).
    """
    path = folder / mutation.path
    text = path.read_text(encoding="utf-8")
    if text.count(mutation.old) != 1:
        raise ValueError(f"{mutation.name}: {mutation.old!r} occurs {text.count(mutation.old)} times in {mutation.path}")
    path.write_text(text.replace(mutation.old, mutation.new), encoding="utf-8")


def main(names: list[str]) -> int:
    chosen = [m for m in MUTATIONS if not names or m.name in names]
    unknown = set(names) - {m.name for m in MUTATIONS}
    if unknown:
        print(f"unknown mutation(s): {', '.join(sorted(unknown))}; known: {', '.join(m.name for m in MUTATIONS)}")
        return 2
    with tempfile.TemporaryDirectory(prefix="sam3-agent-mutations-") as tmp:
        clean = Path(tmp) / "clean"
        copy_project(clean)
        passed, failing, seconds = run_suite(clean, stop_at_first=False)
        print(f"{'unmutated':<24} {'passes' if passed else 'FAILS: ' + failing:<60} {seconds:6.1f} s")
        if not passed:
            return 1
        caught_all = True
        for mutation in chosen:
            folder = Path(tmp) / mutation.name
            copy_project(folder)
            apply(folder, mutation)
            passed, failing, seconds = run_suite(folder, stop_at_first=True)
            caught_all &= not passed
            verdict = f"caught by {failing}" if not passed else "NOT CAUGHT"
            print(f"{mutation.name:<24} {verdict:<60} {seconds:6.1f} s\n{'':<24} ({mutation.what})")
    return 0 if caught_all else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
