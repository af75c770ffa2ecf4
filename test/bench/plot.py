#!/usr/bin/python3
"""Plot launcher init time against the number of workers (make bench).

usage: plot.py INIT_VS_N.csv OUT.png
The CSV is written by test/bench/cmd/podmpi-bench: series,n,median_s,p95_s,kind
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = list(csv.DictReader(open(sys.argv[1])))
    fig, ax = plt.subplots(figsize=(7.5, 5), dpi=110)
    styles = {"launcher init": ("tab:blue", "o"), "mpi-operator entrypoint": ("tab:green", "^"),
              "shell entrypoint": ("tab:red", "s")}
    for series, (color, marker) in styles.items():
        for kind, ls in (("measured", "-"), ("extrapolated", ":")):
            pts = sorted((int(r["n"]), float(r["median_s"]), float(r["p95_s"]))
                         for r in rows if r["series"] == series and r["kind"] == kind)
            if kind == "extrapolated":
                # join the extrapolation to the last measured point
                meas = sorted((int(r["n"]), float(r["median_s"]), float(r["p95_s"]))
                              for r in rows if r["series"] == series and r["kind"] == "measured")
                if not pts:
                    continue
                if meas:
                    pts = [meas[-1]] + pts
            if not pts:
                continue
            n = [p[0] for p in pts]
            med = [p[1] for p in pts]
            up = [max(0.0, p[2] - p[1]) for p in pts]
            label = {"launcher init": "podmpi launcher init (median, bar to p95)",
                     "mpi-operator entrypoint": "mpi-operator's entrypoint: nslookup per host, no SSH check",
                     "shell entrypoint": "shell entrypoint: nslookup + ssh true per host"}[series]
            if kind == "extrapolated":
                label = "shell entrypoint, extrapolated (linear)"
                ax.plot(n, med, ls, color=color, marker="x", label=label)
            else:
                ax.errorbar(n, med, yerr=[[0] * len(up), up], fmt=ls, color=color, marker=marker,
                            capsize=3, label=label)
            for x, y in zip(n, med):
                if kind == "measured" or x != n[0]:
                    ax.annotate(f"{y:.3g} s", (x, y), textcoords="offset points", xytext=(4, -12), fontsize=8, color=color)
    ax.axhline(2.0, color="gray", ls="--", lw=1)
    ax.text(ax.get_xlim()[0] if False else 17, 2.1, "target: 2 s at N = 1024", color="gray", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("workers N (simulated: one worker-agent, N addresses and DNS names)")
    ax.set_ylabel("seconds from start to the exec of mpirun")
    ax.set_title("Launcher init time against N (make bench)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(sys.argv[2])


if __name__ == "__main__":
    main()
