#!/usr/bin/env python3
"""Runs `tessera bench` and the reference's `llama-bench` on the same GGUF
files with the same options, alternating the two process by process, and
prints tokens/s side by side with the ratio tessera / reference.

    scripts/compare_reference.py --llama-bench PATH [options] MODEL...

Both tools write the same JSON fields (model_filename, n_threads, n_prompt,
n_gen, n_depth, avg_ts), which is what this script reads. On a shared
virtual machine the speed drifts by 10-20% within minutes, so the two are
run back to back for every (model, threads) pair, the one that goes first
alternating from round to round, and the ratio reported is the median of
the per-round ratios (each taken from two runs minutes apart at most).

Environment variables given to this script reach both tools (e.g.
TESSERA_CPU_AMX=0 to compare tessera's vector kernels alone).
TESSERA_BACKEND_PATH defaults to the folder of the tessera binary.

Exit status: 0 when every run succeeded; 1 (naming the command and showing
the end of its error output) when one failed or wrote JSON without the
expected fields; 2 for bad arguments.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--llama-bench", required=True, help="path of the reference's llama-bench binary")
    p.add_argument("--tessera", default="build/release/tessera", help="path of the tessera binary (default: %(default)s)")
    p.add_argument("-p", default="512", help="prompt lengths, as both tools take them (default: %(default)s)")
    p.add_argument("-n", default="128", help="generated token counts (default: %(default)s)")
    p.add_argument("-t", default="1,2", help="thread counts, comma-separated (default: %(default)s)")
    p.add_argument("-r", default="3", help="repetitions inside each tool run (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=2, help="alternations of the two tools per (model, threads) (default: %(default)s)")
    p.add_argument("--out", help="folder to keep every run's JSON in (default: not kept)")
    p.add_argument("models", nargs="+", metavar="MODEL", help="GGUF files")
    a = p.parse_args(argv)
    if a.rounds < 1:
        p.error("--rounds must be at least 1")
    for path, what in ((a.llama_bench, "--llama-bench"), (a.tessera, "--tessera")):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            p.error(f"{what} {path!r} is not an executable file")
    for m in a.models:
        if not os.path.isfile(m):
            p.error(f"model {m!r} is not a file")
    threads = a.t.split(",")
    if not all(t.isdigit() and int(t) > 0 for t in threads):
        p.error(f"-t {a.t!r} is not a comma-separated list of positive thread counts")
    a.threads = threads
    return a


def run_json(cmd, env):
    """Runs cmd, returns its stdout parsed as a JSON array; raises RuntimeError naming cmd."""
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        tail = "\n".join(r.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"{' '.join(cmd)}: exit status {r.returncode}\n{tail}")
    try:
        out = json.loads(r.stdout)
    except json.JSONDecodeError as e:
        raise RuntimeError(f"{' '.join(cmd)}: its output is not JSON ({e})")
    if not isinstance(out, list):
        raise RuntimeError(f"{' '.join(cmd)}: its JSON is not an array")
    return out


def test_name(o):
    """pp512, tg128, pp512+tg128, with @dD for a depth, as llama-bench names tests."""
    p, n, d = int(o["n_prompt"]), int(o["n_gen"]), int(o.get("n_depth", 0))
    name = f"pp{p}+tg{n}" if p and n else (f"pp{p}" if p else f"tg{n}")
    return name + (f" @d{d}" if d else "")


def results(cmd, env):
    """{test name: avg_ts} of one tool run."""
    res = {}
    for o in run_json(cmd, env):
        try:
            res[test_name(o)] = float(o["avg_ts"])
        except (KeyError, TypeError, ValueError):
            raise RuntimeError(f"{' '.join(cmd)}: a result lacks n_prompt, n_gen or avg_ts")
    return res


def main(argv):
    a = parse_args(argv)
    env = dict(os.environ)
    env.setdefault("TESSERA_BACKEND_PATH", os.path.dirname(os.path.abspath(a.tessera)))
    opts = ["-p", a.p, "-n", a.n, "-r", a.r, "-o", "json"]
    # (model, threads, test) -> {"tessera": [ts per round], "reference": [...]}
    table = {}
    for rnd in range(a.rounds):
        for m in a.models:
            for t in a.threads:
                tools = [("tessera", [a.tessera, "bench"]), ("reference", [a.llama_bench])]
                if rnd % 2 == 1:
                    tools.reverse()  # the one that ran second last round goes first
                for name, base in tools:
                    cmd = base + ["-m", m, "-t", t] + opts
                    try:
                        res = results(cmd, env)
                    except RuntimeError as e:
                        print(f"compare_reference: {e}", file=sys.stderr)
                        return 1
                    if a.out:
                        os.makedirs(a.out, exist_ok=True)
                        stem = f"{os.path.basename(m)}.t{t}.round{rnd + 1}.{name}.json"
                        with open(os.path.join(a.out, stem), "w") as f:
                            json.dump(res, f, indent=1)
                    for test, ts in res.items():
                        table.setdefault((m, int(t), test), {"tessera": [], "reference": []})[name].append(ts)
                print(f"round {rnd + 1}/{a.rounds}: {os.path.basename(m)}, {t} threads done", file=sys.stderr)

    print("| model | threads | test | tessera t/s | reference t/s | tessera / reference | per round |")
    print("|---|---|---|---|---|---|---|")
    for (m, t, test), v in table.items():
        ours, ref = v["tessera"], v["reference"]
        if len(ours) != len(ref):
            print(f"| {os.path.basename(m)} | {t} | {test} | only one tool ran this test | | | |")
            continue
        ratios = [x / y for x, y in zip(ours, ref) if y > 0]
        rounds = " ".join(f"{r:.2f}" for r in ratios)
        ratio = f"{statistics.median(ratios):.2f}" if ratios else "-"
        print(f"| {os.path.basename(m)} | {t} | {test} | {statistics.median(ours):.2f} | {statistics.median(ref):.2f} | {ratio} | {rounds} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
