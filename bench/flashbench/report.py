"""The suite JSON (docs/bench-schema.md), the table printed after each suite, and its plot."""
import json
import os

SCHEMA_VERSION = 1


def document(suite, machine, flashbox, rows, args):
    return {"schema_version": SCHEMA_VERSION, "suite": suite, "date": flashbox.pop("date"), "machine": machine,
            "flashbox": flashbox, "quick": bool(args.quick), "seed": args.seed,
            "rounds": args.rounds, "rows": rows}


def shape_text(shape):
    keys = [k for k in shape if k not in ("dtype",) and shape[k] not in (None, False)]
    return " ".join(f"{k}={shape[k] if not isinstance(shape[k], list) else len(shape[k])}" for k in keys)


def table(doc):
    """Plain-text table: one line per row, flashbox's perf, the ratio to each peer, error, status."""
    peers = sorted({p for r in doc["rows"] for p in r["ratio"]})
    lines = [f"{doc['suite']}: {doc['machine'].get('gpu')}, flashbox {doc['flashbox'].get('commit')}, "
             f"{doc['date']} (ratio = flashbox speed / peer speed)"]
    head = ["row", "status", "flashbox"] + [f"x {p}" for p in peers] + ["error"]
    body = []
    for r in doc["rows"]:
        fb = r["perf"].get("flashbox")
        body.append([r.get("label", ""), r["status"], f"{fb:.1f} {r['metric']}" if fb else "-"]
                    + [f"{r['ratio'][p]:.3f}" if p in r["ratio"] else "-" for p in peers]
                    + [f"{r['error']:.1e}" if r["error"] is not None else "-"])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    for row in [head] + body:
        lines.append("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))
    return "\n".join(lines)


def dumps(doc):
    """The document as JSON with one line per row (and per other top-level field): a result diffs row
    by row, and a suite's file stays a few dozen lines however many fields a row carries."""
    lines = []
    for key, value in doc.items():
        if key == "rows":
            rows = ",\n".join("  " + json.dumps(r, separators=(",", ":")) for r in value)
            lines.append(f' "rows": [\n{rows}\n ]')
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value, separators=(',', ':'))}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def write(doc, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{doc['suite']}.json")
    with open(path, "w") as f:
        f.write(dumps(doc))
    return path


def plot(doc, out_dir):
    """<suite>.svg: flashbox's and each peer's perf per row (bars). A note when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"{doc['suite']}: no plot (matplotlib is not installed)")
        return None
    rows = [r for r in doc["rows"] if r["perf"]]
    if not rows:
        return None
    names = ["flashbox"] + sorted({n for r in rows for n in r["perf"] if n != "flashbox"})
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(rows) * len(names) / 3), 4.5))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        ax.bar([x + i * width for x in range(len(rows))], [r["perf"].get(name, 0) for r in rows], width, label=name)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(rows))])
    ax.set_xticklabels([r.get("label", "") for r in rows], rotation=60, ha="right", fontsize=6)
    ax.set_ylabel(rows[0]["metric"])
    ax.set_title(f"{doc['suite']}: {doc['machine'].get('gpu')}, flashbox {doc['flashbox'].get('commit')}, "
                 f"{doc['date'][:10]}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(out_dir, f"{doc['suite']}.svg")
    fig.savefig(path)
    plt.close(fig)
    return path
