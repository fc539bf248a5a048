#!/usr/bin/env python3
"""report.py - the tables of bench/compare.sh, from the raw outputs of one run directory
(bench/results/run-*/: NAME.rROUND.json / .time / .rc, meta.txt, notes.txt).

  /usr/bin/python3 bench/report.py compare DIR [--out FILE.md]
  /usr/bin/python3 bench/report.py scaling DIR [--out FILE.md]

Per runtime, each round gives one number, the median of that process's timed runs; the table
shows the median of those round medians, the fastest single run, and the spread of the round
medians (max - min). Ratios divide the peer's median by the row's median. GFLOP/s =
gflop / median time, with gflop from our engine's JSON (convolutions, multiply-add = 2;
210.3 at 512x512). % of peak divides by the FMA loop's best round. Peak RSS is the largest
"Maximum resident set size" /usr/bin/time -v saw over the rounds (the whole process).
Exit status 1 when a runtime has no successful round.
"""

import argparse
import glob
import json
import os
import re
import statistics
import sys

GFLOP_512 = 210.3


def load_runs(directory):
    """{name: [{'round', 'rc', 'json', 'rss_mb'}]} in round order."""
    runs = {}
    for rc_path in glob.glob(os.path.join(directory, "*.r*.rc")):
        m = re.match(r"(.+)\.r(\d+)\.rc$", os.path.basename(rc_path))
        if not m:
            continue
        name, rnd = m.group(1), int(m.group(2))
        base = rc_path[:-3]
        with open(rc_path) as f:
            rc = int(f.read().strip() or 1)
        data = None
        try:
            with open(base + ".json") as f:
                lines = [ln for ln in f.read().splitlines() if ln.strip()]
            data = json.loads(lines[-1]) if lines else None
        except (OSError, ValueError):
            data = None
        rss_mb = None
        try:
            with open(base + ".time") as f:
                mm = re.search(r"Maximum resident set size \(kbytes\): (\d+)", f.read())
            rss_mb = int(mm.group(1)) / 1024.0 if mm else None
        except OSError:
            pass
        ok = rc == 0 and data is not None
        runs.setdefault(name, []).append({"round": rnd, "ok": ok, "json": data, "rss_mb": rss_mb})
    for v in runs.values():
        v.sort(key=lambda r: r["round"])
    return runs


def read_kv(path):
    out = {}
    if os.path.exists(path):
        with open(path) as f:
            for ln in f:
                if "=" in ln:
                    k, v = ln.rstrip("\n").split("=", 1)
                    out[k] = v
    return out


def read_notes(directory):
    path = os.path.join(directory, "notes.txt")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [ln.strip() for ln in f if ln.strip()]


def summarize(rounds):
    ok = [r for r in rounds if r["ok"]]
    if not ok:
        return None
    meds = [r["json"]["ms_median"] for r in ok]
    mins = [r["json"].get("ms_min", r["json"]["ms_median"]) for r in ok]
    rss = [r["rss_mb"] for r in rounds if r["rss_mb"] is not None and r["ok"]]
    return {"median": statistics.median(meds), "min": min(mins), "spread": max(meds) - min(meds),
            "rounds_ok": len(ok), "rounds": len(rounds), "rss": max(rss) if rss else None,
            "json": ok[-1]["json"]}


def header_lines(meta):
    lines = ["%s; %s; animegan.c %s; model %s; %s threads, %s rounds x %s timed runs "
             "(+1 warm-up)." % (
                 meta.get("date", "?"), meta.get("cpu", "?"), meta.get("commit", "?"),
                 meta.get("model", "hayao"), meta.get("threads", "?"), meta.get("rounds", "?"),
                 meta.get("runs", "?"))]
    if meta.get("isa"):
        lines.append("ISA: our passes %s; CPU flags: %s; --precision auto picks %s here." % (
            meta["isa"], meta.get("cpu_flags") or "none of interest", meta.get("auto", "?")))
    lines += ["Load average (1/5/15 min) at start %s, at end %s." % (
        meta.get("load_start", "?"), meta.get("load_end", "?")), ""]
    return lines


def engine_order(names):
    """Native rows first (fp32, bf16, int8, auto), then the AVX2-only ones."""
    rank = {"fp32": 0, "bf16": 1, "int8": 2, "auto": 3}

    def key(n):
        rest = n[len("animegan-"):]
        avx2 = rest.startswith("avx2-")
        p = rest[len("avx2-"):] if avx2 else rest
        return (avx2, rank.get(p, 9), p)
    return sorted(names, key=key)


def precision_label(j, fallback):
    """'bf16', 'auto (bf16)', 'bf16 (emulated)' from our engine's JSON."""
    p = j.get("precision", fallback)
    if j.get("requested") == "auto":
        p = "auto (%s)" % p
    if j.get("emulated"):
        p += " (emulated)"
    return p


def fmt(v, spec, missing="-"):
    return missing if v is None else format(v, spec)


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def compare(directory):
    runs = load_runs(directory)
    meta = read_kv(os.path.join(directory, "meta.txt"))
    notes = read_notes(directory)
    failed = []

    peak_rounds = [r["json"]["gflops"] for r in runs.get("fma-peak", []) if r["ok"]]
    peak = max(peak_rounds) if peak_rounds else None
    if peak is None:
        failed.append("fma-peak")
    peak2_rounds = [r["json"]["gflops"] for r in runs.get("fma-peak-avx2", []) if r["ok"]]
    peak2 = max(peak2_rounds) if peak2_rounds else None
    if "fma-peak-avx2" in runs and peak2 is None:
        failed.append("fma-peak-avx2")

    engine = engine_order(n for n in runs if n.startswith("animegan-"))
    peers = ["pytorch", "onnxruntime"] if meta.get("peers", "1") == "1" else []
    if meta.get("ort_peer") == "1":  # AnimeGANv3: ONNX Runtime on the original .onnx only
        peers = ["onnxruntime"]
    order = engine + peers
    stats = {}
    for name in order:
        s = summarize(runs.get(name, []))
        if s is None:
            failed.append(name)
        stats[name] = s

    size = int(meta.get("size", "512"))
    gflop = None
    for name in engine:
        if stats.get(name) and "gflop" in stats[name]["json"]:
            gflop = stats[name]["json"]["gflop"]
            break
    if gflop is None:
        gflop = GFLOP_512 * size * size / (512.0 * 512.0)

    torch_ms = stats["pytorch"]["median"] if stats.get("pytorch") else None
    torch_ms = torch_ms if peers else None
    ort_ms = stats["onnxruntime"]["median"] if stats.get("onnxruntime") else None
    rows = []
    for name in order:
        s = stats.get(name)
        avx2 = name.startswith("animegan-avx2-")
        label = {"pytorch": "PyTorch %s eager", "onnxruntime": "ONNX Runtime %s (node)"}.get(
            name, "animegan.c, AVX2 only" if avx2 else "animegan.c")
        if s is None:
            prec = name.split("-")[-1] if name.startswith("animegan-") else "fp32"
            rows.append([label.replace(" %s", ""), prec, "failed"] + ["-"] * 7)
            continue
        row_peak = peak2 if avx2 else peak
        if "%s" in label:
            label = label % s["json"].get("version", "")
        gflops = gflop / (s["median"] / 1000.0)
        rounds = "" if s["rounds_ok"] == s["rounds"] else " (%d/%d rounds)" % (
            s["rounds_ok"], s["rounds"])
        rows.append([
            label + rounds,
            precision_label(s["json"], "fp32") if name.startswith("animegan-") else "fp32",
            "%.0f" % s["median"], "%.0f" % s["min"], "%.0f" % s["spread"],
            fmt(torch_ms / s["median"] if torch_ms else None, ".2f") + "x",
            fmt(ort_ms / s["median"] if ort_ms else None, ".2f") + "x",
            "%.1f" % gflops, fmt(100.0 * gflops / row_peak if row_peak else None, ".1f") + "%",
            fmt(s["rss"], ".0f"),
        ])

    threads = meta.get("threads", "?")
    out = ["# animegan.c vs peers, %dx%d, %s threads" % (size, size, threads), ""]
    out += header_lines(meta)
    out += table(["runtime", "precision", "median ms", "min ms", "spread ms", "vs PyTorch",
                  "vs ONNX Runtime", "GFLOP/s", "% of FMA peak", "peak RSS MB"], rows)
    out.append("")
    out.append("median = median over rounds of each round's median of %s timed runs; "
               "spread = max - min of the round medians; GFLOP/s = %.1f GFLOP / median; "
               "peak RSS = whole process (/usr/bin/time -v), max over rounds."
               % (meta.get("runs", "?"), gflop))
    if peak:
        out.append("FMA peak (%s threads, AVX-512, per-thread CPU time): %.1f GFLOP/s best "
                   "round, rounds %s." % (threads, peak,
                                          ", ".join("%.0f" % v for v in peak_rounds)))
    if peak2:
        out.append("AVX2 FMA peak (%s threads, the denominator of the AVX2-only rows): %.1f "
                   "GFLOP/s best round, rounds %s. AVX2-only rows run with ANIMEGAN_ISA=avx2 "
                   "ONEDNN_MAX_CPU_ISA=AVX2." % (threads, peak2,
                                                 ", ".join("%.0f" % v for v in peak2_rounds)))
    torch_json = stats["pytorch"]["json"] if stats.get("pytorch") else {}
    if torch_json.get("resize") == "align-corners":
        out.append("PyTorch runs the network as its users do: F.interpolate(bilinear, "
                   "align_corners=True) for the two upsamplings, whose sampling coordinates "
                   "differ slightly from the TF-legacy resize our engine and ONNX Runtime "
                   "compute (same cost class; the picture differs a little).")
    checks = [r["json"].get("check_max_abs") for r in runs.get("onnxruntime", []) if r["ok"]]
    checks = [c for c in checks if c is not None]
    if checks:
        out.append("ONNX Runtime output vs PyTorch on the same input: max |diff| %.2g."
                   % max(checks))
    out += ["Note: " + n for n in notes]
    if failed:
        out.append("FAILED (no successful round): " + ", ".join(failed))
    return out, failed


def scaling(directory):
    runs = load_runs(directory)
    meta = read_kv(os.path.join(directory, "meta.txt"))
    notes = read_notes(directory)
    failed = []
    rows = []
    by = {}
    for name in runs:
        m = re.match(r"animegan-(\w+)-(\d+)$", name)
        if m:
            by[(m.group(1), int(m.group(2)))] = name
    for prec in sorted({p for p, _ in by}):
        sizes = sorted(s for p, s in by if p == prec)
        # ms / MP relative to 512x512 (the benchmark's size) when it was run, else the smallest
        ref = summarize(runs[by[(prec, 512 if 512 in sizes else sizes[0])]])
        base = ref["median"] / ((512 if 512 in sizes else sizes[0]) ** 2 / 1e6) if ref else None
        for size in sizes:
            s = summarize(runs[by[(prec, size)]])
            if s is None:
                failed.append(by[(prec, size)])
                rows.append([prec, "%d" % size, "failed"] + ["-"] * 6)
                continue
            mp = size * size / 1e6
            per_mp = s["median"] / mp
            base = base or per_mp
            arena = s["json"].get("arena_mb")
            rows.append([prec, "%dx%d" % (size, size), "%.3f" % mp, "%.0f" % s["median"],
                         "%.0f" % s["spread"], "%.0f" % per_mp, "%.2f" % (per_mp / base),
                         fmt(arena, ".1f"), fmt(arena / mp if arena is not None else None, ".1f"),
                         fmt(s["rss"], ".0f")])
    out = ["# animegan.c cost against image size", ""]
    out += header_lines(meta)
    out += table(["precision", "size", "megapixels", "median ms", "spread ms", "ms / MP",
                  "ms / MP vs 512x512", "arena MB", "arena MB / MP", "peak RSS MB"], rows)
    out.append("")
    out.append("Linear cost means constant ms / MP and arena MB / MP down each column.")
    out += ["Note: " + n for n in notes]
    if failed:
        out.append("FAILED (no successful round): " + ", ".join(failed))
    return out, failed


def main():
    ap = argparse.ArgumentParser(description="tables from a bench/compare.sh run directory")
    ap.add_argument("mode", choices=("compare", "scaling"))
    ap.add_argument("directory")
    ap.add_argument("--out", help="also write the report to this Markdown file")
    a = ap.parse_args()
    lines, failed = (compare if a.mode == "compare" else scaling)(a.directory)
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
        print("written to %s (raw outputs in %s)" % (a.out, a.directory))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
