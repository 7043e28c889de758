"""Benchmark: is `run_all.sh --affected` safe? Breaking one-line edits planted in nemo_rl/.

    uv run bench/planted_edits.py            # full: record, then per edit select AND run every CPU script
    uv run bench/planted_edits.py --judge    # fast (CI): per edit, only `--affected --list` against the
                                             # recorded reach; checks the failures the last full run saw

Full method: one recording `run_all.sh` with no edit (every CPU-capable script passes and
records its reach). Then for each planted edit: apply it, ask `run_all.sh --affected --list`
which scripts it selects, run EVERY CPU-capable script anyway, and note which fail. A miss is a
script that failed under an edit without being selected: the selection must have none. The
reach file is restored after each edit (a run under an edit must not become the baseline).
Prints a table, the share of scripts selected on average, and rewrites its section of
docs/benchmarks.md (`<!-- planted_edits:start -->`); exit 1 on a miss.

--judge (what CI runs after its recording run_all.sh): the same edits, only the selection,
checked against FAILS below (what the last full run saw fail under each edit): every one of
them must still be selected. Seconds, no training.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ROOT, machine, md_table, print_table, today, update_section  # noqa: E402

RUN_ALL = ROOT / "tests" / "functional" / "run_all.sh"
REACH = ROOT / ".nrl_functional_reach.json"


@dataclass(frozen=True)
class Edit:
    name: str
    path: str
    old: str  # one whole line, found exactly once
    new: str
    breaks: str  # what it should break, in words
    fails: frozenset[str]  # scripts the last full run saw fail under it (checked by --judge)


def _e(name: str, path: str, old: str, new: str, breaks: str, *fails: str) -> Edit:
    return Edit(name, path, old, new, breaks, frozenset(fails))


# The last argument(s): the scripts the full run of 2026-12-07 (at f4c9eec) saw fail under the edit.
EVERY = ("eval", "grpo", "sft", "sft_resume", "sft_two_workers")
EDITS = [
    _e("nll-loss-zero", "nemo_rl/algorithms/loss_functions.py",
       "        return loss, {}", "        return loss * 0, {}", "SFT learns nothing", *EVERY),
    _e("pg-loss-zero", "nemo_rl/algorithms/loss_functions.py",
       "        return (per_token * mask).sum(), metrics", "        return (per_token * mask).sum() * 0, metrics",
       "GRPO learns nothing", "grpo"),
    _e("advantages-zero", "nemo_rl/algorithms/grpo.py",
       "    return adv.reshape(-1)", "    return adv.reshape(-1) * 0", "GRPO has no signal", "grpo"),
    _e("reward-zero", "nemo_rl/environments/math_environment.py",
       "    return 1.0 if answer is not None and answers_match(answer, reference) else 0.0",
       "    return 0.0", "every answer scores 0", "eval", "grpo"),
    _e("sampling-constant", "nemo_rl/models/generation/hf_sampler.py",
       "    tok = torch.multinomial(probs.cpu(), 1, generator=gen).squeeze(-1).to(logits.device)",
       "    tok = probs.argmin(dim=-1)", "sampled tokens are the least likely ones", "grpo"),
    _e("assistant-mask-empty", "nemo_rl/data/tokenize.py",
       "            mask += [0] * n_header + [1] * (len(new) - n_header)", "            mask += [0] * len(new)",
       "no token is learned", *EVERY),
    _e("optimizer-skipped", "nemo_rl/models/policy/workers/base.py",
       "        if math.isfinite(grad_norm):  # a NaN/inf step is skipped, and reported through grad_norm",
       "        if False:  # planted", "no optimizer step", *EVERY),
    _e("never-due", "nemo_rl/algorithms/utils.py",
       "    return period > 0 and (step % period == 0 or step == last_step)", "    return False",
       "no validation, no checkpoint", *EVERY),
    _e("logger-drops-metrics", "nemo_rl/utils/logger.py",
       "                self.writer.add_scalar(k, float(v), step)", "                pass",
       "nothing reaches TensorBoard", *EVERY),
    _e("overrides-ignored", "nemo_rl/config.py",
       "        OmegaConf.update(cfg, key, value, merge=False, force_add=add)", "        pass",
       "config overrides are dropped", *EVERY),
    _e("megatron-grad-norm", "nemo_rl/models/megatron/megatron_policy_worker.py",
       "        norm = float((split + replicated).sqrt())", "        norm = float('nan')",
       "Megatron never steps (GPU scripts only)"),
    _e("group-mean", "nemo_rl/algorithms/grpo.py",
       "    adv = grouped - grouped.mean(dim=1, keepdim=True)", "    adv = grouped",
       "advantages lose their baseline", "grpo"),
]  # fmt: skip


def apply(edit: Edit) -> str:
    path = ROOT / edit.path
    text = path.read_text()
    lines = text.split("\n")
    if lines.count(edit.old) != 1:
        raise SystemExit(f"planted edit {edit.name}: {edit.path} has {lines.count(edit.old)} copies of its line")
    path.write_text("\n".join(edit.new if line == edit.old else line for line in lines))
    return text


def cpu_scripts() -> list[str]:
    out = subprocess.run(["bash", str(RUN_ALL), "--list", "--gpus", "0"], capture_output=True, text=True, check=True)
    return [row.split()[0] for row in out.stdout.splitlines()[1:] if row.split()[1:2] == ["0"]]


def selected(scripts: list[str]) -> set[str]:
    out = subprocess.run(
        ["bash", str(RUN_ALL), "--affected", "--list", "--gpus", "0", *scripts],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"run_all.sh --affected --list failed:\n{out.stdout}{out.stderr}")
    return {row.split()[0] for row in out.stdout.splitlines()[1:] if row.split(None, 2)[2].startswith("runs:")}


def failing(scripts: list[str]) -> tuple[set[str], float]:
    started = time.monotonic()
    out = subprocess.run(["bash", str(RUN_ALL), "--gpus", "0", *scripts], capture_output=True, text=True, check=False)
    rows = out.stdout.splitlines()
    table = rows[next(i for i, r in enumerate(rows) if r.startswith("NAME")) + 1 :]
    return {r.split()[0] for r in table if r.split()[1:2] != ["PASS"]}, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--judge", action="store_true", help="selection only, against the recorded reach (CI)")
    parser.add_argument("--no-record", action="store_true", help="full mode: use the reach already recorded")
    args = parser.parse_args()
    scripts = cpu_scripts()
    if not args.judge and not args.no_record:
        print(f"recording: run_all.sh with no edit ({', '.join(scripts)})", flush=True)
        bad, took = failing(scripts)
        if bad:
            raise SystemExit(f"the recording run failed ({', '.join(sorted(bad))}): fix that first")
        print(f"recorded in {took:.0f} s", flush=True)
    if not REACH.is_file():
        raise SystemExit(f"{REACH.name} is missing: run `uv run bash tests/functional/run_all.sh` first")
    if selected(scripts):
        raise SystemExit("with no edit, run_all.sh --affected still selects scripts: record them first")
    rows, misses, shares, results = [], 0, [], []
    for edit in EDITS:
        saved_reach = REACH.read_bytes()
        original = apply(edit)
        try:
            chosen = selected(scripts)
            if args.judge:
                failed, took = set(edit.fails), 0.0
            else:
                print(f"{edit.name}: running {', '.join(scripts)} under the edit", flush=True)
                failed, took = failing(scripts)
        finally:
            (ROOT / edit.path).write_text(original)
            REACH.write_bytes(saved_reach)
        missed = failed - chosen
        misses += len(missed)
        shares.append(len(chosen) / len(scripts))
        results.append(
            {"edit": edit.name, "selected": sorted(chosen), "failed": sorted(failed), "missed": sorted(missed)}
        )
        rows.append([edit.name, edit.path.removeprefix("nemo_rl/"), ", ".join(sorted(chosen)) or "-",
                     ", ".join(sorted(failed)) or "-", ", ".join(sorted(missed)) or "0",
                     "" if args.judge else f"{took:.0f} s"])  # fmt: skip
    share = sum(shares) / len(shares)
    header = ["edit", "file", "selected", "failed" + (" (last full run)" if args.judge else ""), "missed", "wall"]
    title = f"planted edits ({len(EDITS)}; {len(scripts)} CPU scripts): {misses} misses, {share:.0%} of scripts selected on average"
    print_table(title, header, rows)
    if not args.judge:
        body = (
            "## Planted edits\n\n"
            f"Is `run_all.sh --affected` safe (issue 50)? {today()}, {machine()}; `uv run bench/planted_edits.py`: "
            f"{title}.\n\n" + md_table(header, rows)
        )
        update_section("planted_edits", body)
        print(json.dumps(results))
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
