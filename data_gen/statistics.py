"""Dataset statistics: the paper's Appendix A columns and section 4.2 observations (computed when a
dataset is built; ``python -m data_gen.stats`` prints them)."""

from __future__ import annotations

from typing import Any

import numpy as np


def dataset_statistics(ds: Any) -> dict[str, Any]:
    """Size, 1/2/3-action CFE counts, CFE frequencies of the 'all' train split, per group."""
    lengths = ds.length
    train, _ = ds.split("all")
    counts = np.bincount(train.class_ids)
    counts = counts[counts > 0]
    stats: dict[str, Any] = {
        "size": int(len(ds)),
        "by_length": {str(k): int((lengths == k).sum()) for k in range(1, int(lengths.max(initial=0)) + 1)},
        "distinct_cfes": int(len(ds.vocabulary)),
        "train_distinct_cfes": int(len(counts)),
        "train_mean_agents_per_cfe": round(float(counts.mean()), 3) if len(counts) else 0.0,
        "train_mean_cfe_frequency_pct": round(float(100 * counts.mean() / max(len(train), 1)), 4) if len(counts) else 0.0,
        "train_share_cfes_seen_once_pct": round(float(100 * (counts == 1).mean()), 3) if len(counts) else 0.0,
        "filters": {rule: int(sum(len(s) for s in ds.split(rule))) for rule in ("all", ">10", ">40")},
    }
    if ds.world.n_groups > 1:
        stats["by_group"] = {str(g): {str(k): int(((ds.groups == g) & (lengths == k)).sum()) for k in (1, 2, 3)}
                             for g in range(ds.world.n_groups)}
    return stats


def format_table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    head = "| dataset | size | 1-action | 2-action | 3-action | distinct CFEs | mean agents/CFE | CFEs seen once % | >10 | >40 |"
    lines = [head, "|" + "---|" * 10]
    for name, s in rows:
        b = s["by_length"]
        lines.append(f"| {name} | {s['size']} | {b.get('1', 0)} | {b.get('2', 0)} | {b.get('3', 0)} | "
                     f"{s['train_distinct_cfes']} | {s['train_mean_agents_per_cfe']} | "
                     f"{s['train_share_cfes_seen_once_pct']} | {s['filters']['>10']} | {s['filters']['>40']} |")
    return "\n".join(lines)
