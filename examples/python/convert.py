"""Convert an image folder into a stoker dataset from Python, then look inside it.

    pip install ./python                     # from the repository root
    python examples/python/convert.py photos/train data/train [--max-side 512] [--strict]

The same conversion as ``stoker convert SRC OUT``: the report is the dict that
``stoker convert --json`` prints. A progress bar shows on a terminal.
"""

import argparse

import stoker


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", help="image folder: one subdirectory per class")
    p.add_argument("out", help="output directory (new or empty)")
    p.add_argument("--max-side", type=int, help="re-encode images whose longer side exceeds this")
    p.add_argument("--jobs", type=int, help="worker threads (default: all cores)")
    p.add_argument("--strict", action="store_true", help="stop at the first bad image")
    p.add_argument("--gpu-friendly", action="store_true", help="re-encode JPEGs nvJPEG's hardware decoder cannot take")
    args = p.parse_args()

    report = stoker.convert(
        args.src,
        args.out,
        max_side=args.max_side,
        jobs=args.jobs,
        strict=args.strict,
        gpu_friendly=args.gpu_friendly,
    )
    secs = max(report["seconds"], 1e-9)
    print(
        f"converted {report['written']} of {report['inputs']} images into {report['shards']} shard(s), "
        f"{report['bytes'] / 1e6:.1f} MB in {report['seconds']:.2f} s ({report['written'] / secs:.0f} img/s)"
    )
    for s in report["skipped"]:
        print(f"  skipped {s['path']}: {s['reason']}")

    ds = stoker.Dataset(args.out)
    payload, label = ds[0]
    print(f"{ds}: classes {ds.classes}")
    print(f"record 0: {len(payload)} bytes, label {label} ({ds.classes[label]})")


if __name__ == "__main__":
    main()
