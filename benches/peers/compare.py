#!/usr/bin/env python3
"""Runs `stoker bench` and the peers on the same images, batch size and machine, in one run,
and prints each peer's img/s beside stoker's figure for the same stage, with the ratio.

  compare.py --stoker target/release/stoker --dataset DS_DIR --images JPEG_DIR
             [--device auto|cpu|cuda:N] [--batch B] [--size S] [--seconds T]
             [--tsv OUT/table.tsv] [--json-out all.json] [--markdown]

DS_DIR is the converted dataset of the JPEGs in JPEG_DIR. Peers that cannot run here
(no torch, no GPU, no nvImageCodec) are listed with the reason. With --tsv, rows
`name<TAB>value<TAB>unit<TAB>note` are appended (the device-check table format).
"""

import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import peer_common as pc  # noqa: E402


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def run_peer(script, args, name, stage, timeout):
    path = os.path.join(HERE, script)
    if not os.path.exists(path):
        return [{"peer": name, "stage": stage, "img_per_s": None, "reason": f"{script} not present"}]
    cmd = [sys.executable, path] + args
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [{"peer": name, "stage": stage, "img_per_s": None, "reason": f"timed out after {timeout} s"}]
    rows = []
    for line in p.stdout.strip().splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if isinstance(r, dict) and "img_per_s" in r:
                r.setdefault("peer", name)
                r.setdefault("stage", stage)
                rows.append(r)
    if not rows:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or [""]
        rows = [{"peer": name, "stage": stage, "img_per_s": None,
                 "reason": f"exit {p.returncode}, no result line: {tail[0][:200]}"}]
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stoker", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--images", required=True)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--consumer-ms", type=float, default=0.0)
    ap.add_argument("--tsv")
    ap.add_argument("--json-out")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()

    cmd = [a.stoker, "bench", a.dataset, "--json", "--device", a.device, "--batch", str(a.batch),
           "--size", str(a.size), "--seconds", str(a.seconds), "--consumer-ms", str(a.consumer_ms)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout)
        print(p.stderr, file=sys.stderr)
        raise SystemExit(f"stoker bench failed (exit {p.returncode}): {' '.join(cmd)}")
    report = json.loads(p.stdout)
    stages = report["stages"]
    gpu = report["machine"].get("gpu") is not None

    secs = str(a.seconds)
    to = int(60 + 4 * a.seconds)
    common = [a.images, "--seconds", secs, "--batch", str(a.batch)]
    peers = []
    peers += run_peer("pil_pool.py", common + ["--mode", "decode"], "pil_pool_decode", "cpu_decode", to)
    peers += run_peer("pil_pool.py", common + ["--mode", "loader", "--size", str(a.size)], "pil_pool_loader", "end_to_end", to)
    peers += run_peer("pil_decode.py", [a.images, "--seconds", secs], "pil_decode_1core", "cpu_decode", to)
    tl = run_peer("torch_loader.py", ["--images", a.images, "--batch", str(a.batch), "--size", str(a.size),
                                      "--epochs", "2"], "torch_loader", "end_to_end", 4 * to)
    for r in tl:
        r["peer"] = "torch_loader" if r.get("peer") in (None, "torch_loader") else f"torch_loader:{r['peer']}"
        r.setdefault("note", "PIL+numpy worker processes, DataLoader-style shared-memory batches (workers = cores)")
    peers += tl
    peers += run_peer("torchvision_decode.py", common + ["--device", "cpu"], "torchvision_decode_jpeg_cpu", "cpu_decode", to)
    if gpu:
        dev = a.device if a.device.startswith("cuda") else "cuda"
        peers += run_peer("torchvision_decode.py", common + ["--device", dev], "torchvision_decode_jpeg_cuda", "gpu_decode", to)
        peers += run_peer("nvimagecodec_decode.py", common, "nvimagecodec", "gpu_decode", 2 * to)

    lines = []
    lines.append(f"stoker bench {a.dataset}: device {report['run']['device']}, batch {a.batch}, size {a.size}, "
                 f"{a.seconds} s/stage, {report['machine']['cores']} cores, GPU {report['machine'].get('gpu') or 'none'}")
    for name, s in stages.items():
        v = s.get("img_per_s")
        lines.append(f"  stoker {name:<11} {('%.0f' % v) if v is not None else '-':>10} img/s  {s.get('note') or s.get('reason') or ''}")
    lines.append(f"  verdict: {report['verdict']['text']}")
    lines.append("")
    hdr = f"  {'peer':<30} {'stage':<15} {'peer img/s':>10} {'stoker img/s':>12} {'stoker/peer':>11} {'per CPU-s':>9}"
    lines.append(hdr)
    md = ["| peer | stage | peer img/s | stoker img/s (same stage) | stoker / peer | stoker / peer per CPU-second | peer note |",
          "|---|---|---:|---:|---:|---:|---|"]
    tsv = []
    for r in peers:
        st = r.get("stage")
        mine = stages.get(st, {}).get("img_per_s") if st in stages else None
        per_core = r.get("workers") == 1 and "1core" in r.get("peer", "")
        if per_core and mine is not None:
            # A one-core peer is compared with stoker's images per CPU-second (the
            # per-core rate, which other load on the machine does not dilute), else
            # with its figure per thread.
            threads = stages[st].get("threads") or report["machine"]["cores"] or 1
            mine = stages[st].get("img_per_cpu_s") or mine / threads
            st = st + "/core"
        pv = r.get("img_per_s")
        ratio = (mine / pv) if (mine is not None and pv) else None
        # Per CPU-second, where both sides report it (robust to other load on the cores).
        m = re.search(r"(?:cpu_time|;) ?([0-9.]+) img(?:/s| per worker CPU-second)", r.get("note") or "")
        peer_cpu = float(m.group(1)) if m else None
        mine_cpu = stages.get(r.get("stage"), {}).get("img_per_cpu_s")
        if peer_cpu and mine_cpu:
            r["cpu_second_ratio"] = mine_cpu / peer_cpu
        fmt = lambda v: ("%.0f" % v) if v is not None else "-"  # noqa: E731
        rs = ("%.2f×" % ratio) if ratio is not None else "-"
        why = r.get("reason") or r.get("note") or ""
        cs = ("%.2f×" % r["cpu_second_ratio"]) if r.get("cpu_second_ratio") else "-"
        lines.append(f"  {r['peer']:<30} {st:<15} {fmt(pv):>10} {fmt(mine):>12} {rs:>11} {cs:>9}  {why}")
        md.append(f"| {r['peer']} | {st} | {fmt(pv)} | {fmt(mine)} | {rs} | {cs} | {why} |")
        tsv.append((f"peer:{r['peer']}", fmt(pv) if pv is not None else "null", "img/s",
                    (f"stoker {st} {fmt(mine)} img/s, ratio {rs}" if pv is not None else f"not run: {why}")))
    bench_rows = []
    for name, s in stages.items():
        v = s.get("img_per_s")
        bench_rows.append((f"bench:{name}", ("%.0f" % v) if v is not None else "null", "img/s",
                           (s.get("note") or "")[:160] if v is not None else f"not measured: {s.get('reason')}"))
    tsv = bench_rows + tsv
    tsv.append(("bench:verdict", report["verdict"].get("bound") or "none", "bound", report["verdict"]["text"][:200]))
    print("\n".join(lines))
    if a.markdown:
        print()
        print("\n".join(md))
    if a.tsv:
        with open(a.tsv, "a") as fh:
            for row in tsv:
                fh.write("\t".join(str(c).replace("\t", " ").replace("\n", " ") for c in row) + "\n")
    if a.json_out:
        with open(a.json_out, "w") as fh:
            json.dump({"stoker": report, "peers": peers}, fh, indent=2)


if __name__ == "__main__":
    main()
